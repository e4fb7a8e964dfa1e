"""Client: the calls of sandboxd.v1.Sandboxes over a unix socket or TCP+TLS."""

import os

import grpc

from . import sandbox_pb2 as pb
from . import sandbox_pb2_grpc as pb_grpc

# Where deploy/sandboxd.service puts the socket; $SANDBOXD_SOCKET overrides.
DEFAULT_SOCKET = "/run/sandboxd/sandboxd.sock"


def process_spec(argv, env=None, cwd="", tty=False, uid=None, gid=None):
    """A ProcessSpec: argv (a list), env (a dict or a list of "K=V")."""
    if isinstance(env, dict):
        env = ["%s=%s" % kv for kv in env.items()]
    p = pb.ProcessSpec(argv=list(argv), env=list(env or []), cwd=cwd, tty=tty)
    if uid is not None or gid is not None:
        p.user.uid = uid or 0
        p.user.gid = gid or 0
    return p


def sandbox_spec(argv, rootfs="", env=None, cwd="", tty=False, memory_bytes=0,
                 cpu_millis=0, pids=0, labels=None, hostname="", platform=""):
    """A SandboxSpec whose init runs argv; 0 and "" mean the daemon's defaults."""
    s = pb.SandboxSpec(rootfs=rootfs, hostname=hostname, platform=platform,
                       process=process_spec(argv, env, cwd, tty))
    s.limits.memory_bytes = memory_bytes
    s.limits.cpu_millis = cpu_millis
    s.limits.pids = pids
    s.labels.update(labels or {})
    return s


def exit_code(status):
    """sandboxctl's exit code for an ExitStatus: the code, 128+N for signal
    N, 125 when the sandbox failed (status.error)."""
    if status.error:
        return 125
    if status.WhichOneof("status") == "signal":
        return 128 + status.signal
    return status.code


class Client:
    """A connection to sandboxd. ``socket``: a unix socket path (default
    $SANDBOXD_SOCKET, else DEFAULT_SOCKET); or ``address`` ("host:port") with
    ``ca_cert`` (PEM bytes) and ``token`` for the daemon's TCP+TLS listener."""

    def __init__(self, socket=None, address=None, ca_cert=None, token=None):
        if address:
            creds = grpc.ssl_channel_credentials(root_certificates=ca_cert)
            if token:
                creds = grpc.composite_channel_credentials(
                    creds, grpc.access_token_call_credentials(token))
            self._channel = grpc.secure_channel(address, creds)
        else:
            path = socket or os.environ.get("SANDBOXD_SOCKET") or DEFAULT_SOCKET
            self._channel = grpc.insecure_channel("unix:" + path)
        self.stub = pb_grpc.SandboxesStub(self._channel)

    def close(self):
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- unary calls ------------------------------------------------------

    def create(self, argv_or_spec, id="", **spec_fields):
        """Creates a sandbox (CREATED); returns its id. The first argument is
        a SandboxSpec, or argv with sandbox_spec's keyword arguments."""
        spec = argv_or_spec
        if not isinstance(spec, pb.SandboxSpec):
            spec = sandbox_spec(argv_or_spec, **spec_fields)
        return self.stub.Create(pb.CreateRequest(spec=spec, id=id)).id

    def start(self, sandbox_id):
        self.stub.Start(pb.StartRequest(id=sandbox_id))

    def wait(self, sandbox_id, timeout=None):
        """The init's ExitStatus once it has exited (grpc.RpcError with
        DEADLINE_EXCEEDED after `timeout` seconds)."""
        return self.stub.Wait(pb.WaitRequest(id=sandbox_id), timeout=timeout).exit

    def signal(self, sandbox_id, signal, all=False, pid=0):
        self.stub.Signal(pb.SignalRequest(id=sandbox_id, signal=signal, all=all, pid=pid))

    def destroy(self, sandbox_id):
        """Kills what is left and forgets the sandbox; its ExitStatus."""
        return self.stub.Destroy(pb.DestroyRequest(id=sandbox_id)).exit

    def get(self, sandbox_id):
        return self.stub.Get(pb.GetRequest(id=sandbox_id)).info

    def list(self, labels=None):
        return list(self.stub.List(pb.ListRequest(label_selector=labels or {})).sandboxes)

    def logs(self, sandbox_id, follow=False):
        """The init's buffered output, as (stream, bytes) pairs."""
        for r in self.stub.Logs(pb.LogsRequest(id=sandbox_id, follow=follow)):
            kind = r.WhichOneof("msg")
            if kind:
                yield kind, getattr(r, kind)

    def update(self, sandbox_id, memory_bytes=0, cpu_millis=0, pids=0, unlimited=()):
        """Changes a RUNNING sandbox's limits: a 0 keeps that limit;
        `unlimited` names the ones to lift ("memory", "cpu", "pids": the
        daemon's default, or none). Returns the sandbox's Limits now."""
        unknown = set(unlimited) - {"memory", "cpu", "pids"}
        if unknown:
            raise ValueError("unlimited: unknown limits %s" % sorted(unknown))
        req = pb.UpdateRequest(id=sandbox_id)
        req.limits.memory_bytes = memory_bytes
        req.limits.cpu_millis = cpu_millis
        req.limits.pids = pids
        for name in unlimited:
            setattr(req.unlimited, name, True)
        return self.stub.Update(req).limits

    def pause(self, sandbox_id):
        """RUNNING -> PAUSED: every host process of the sandbox stopped."""
        self.stub.Pause(pb.PauseRequest(id=sandbox_id))

    def resume(self, sandbox_id):
        """PAUSED -> RUNNING."""
        self.stub.Resume(pb.ResumeRequest(id=sandbox_id))

    def checkpoint(self, sandbox_id, image_dir, leave_running=False):
        return self.stub.Checkpoint(pb.CheckpointRequest(
            id=sandbox_id, image_dir=image_dir, leave_running=leave_running))

    def restore(self, image_dir, id="", spec=None):
        """Restores an image into a new RUNNING sandbox; its id."""
        req = pb.RestoreRequest(image_dir=image_dir, id=id)
        if spec is not None:
            req.spec.CopyFrom(spec)
        return self.stub.Restore(req).id

    # -- streaming --------------------------------------------------------

    def exec(self, sandbox_id, argv_or_process, stdin=None, **process_fields):
        """Runs a process in a RUNNING sandbox and yields its output as it
        comes: ("pid", N) first, then ("stdout" | "stderr", bytes) pairs, and
        last ("exit", ExitStatus). `stdin`: bytes, or an iterable of bytes
        chunks (sent while the output streams), or None (EOF at once)."""
        process = argv_or_process
        if not isinstance(process, pb.ProcessSpec):
            process = process_spec(argv_or_process, **process_fields)
        start = pb.ExecRequest.Start(id=sandbox_id, process=process)
        return self._exec(start, stdin)

    def run(self, argv_or_spec, stdin=None, remove=True, **spec_fields):
        """A whole run in one Exec call (create, attach, start, wait; with
        `remove` the daemon destroys the sandbox at the end), yielding as
        exec does, with ("id", ID) first."""
        spec = argv_or_spec
        if not isinstance(spec, pb.SandboxSpec):
            spec = sandbox_spec(argv_or_spec, **spec_fields)
        start = pb.ExecRequest.Start(attach=True, remove=remove,
                                     create=pb.CreateRequest(spec=spec))
        return self._exec(start, stdin)

    def _exec(self, start, stdin):
        if isinstance(stdin, (bytes, bytearray)):
            stdin = [bytes(stdin)]
        responses = self.stub.Exec(_requests(start, stdin))
        first = True
        for r in responses:
            if first:
                first = False
                if r.id:
                    yield "id", r.id
                yield "pid", r.pid
            kind = r.WhichOneof("msg")
            if kind == "exit":
                yield "exit", r.exit
                return
            if kind:
                yield kind, getattr(r, kind)


def _requests(start, stdin):
    """Exec's request stream: start, the stdin chunks, close_stdin, then the
    half-close (the daemon ends the call with the exit message)."""
    yield pb.ExecRequest(start=start)
    for chunk in stdin or ():
        if chunk:
            yield pb.ExecRequest(stdin=chunk)
    yield pb.ExecRequest(close_stdin=True)
