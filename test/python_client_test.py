#!/usr/bin/python3
"""The Python client (client/python/sandboxd_client) against a real sandboxd.

Usage: python_client_test.py SOCKET   (sandboxd_client importable: PYTHONPATH)

Create, start, exec with output streamed while the process runs, stdin,
exit codes and signals, wait, labels, Get and List, Destroy, a whole run in
one call, and the daemon's errors as grpc.RpcError with their codes.
"""

import sys
import time
import unittest

import grpc

import sandboxd_client
from sandboxd_client import Client, exit_code, sandbox_pb2 as pb

SOCKET = None


class ClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = Client(socket=SOCKET)

    @classmethod
    def tearDownClass(cls):
        cls.c.close()

    def sandbox(self, argv=("/bin/sleep", "1000"), **fields):
        sid = self.c.create(list(argv), **fields)
        self.addCleanup(self._destroy_quietly, sid)
        return sid

    def _destroy_quietly(self, sid):
        try:
            self.c.destroy(sid)
        except grpc.RpcError:
            pass

    def collect(self, events):
        out = {"stdout": b"", "stderr": b""}
        exit_status = None
        for kind, value in events:
            if kind in out:
                out[kind] += value
            elif kind == "exit":
                exit_status = value
        return out["stdout"], out["stderr"], exit_status

    def test_create_start_exec_wait_destroy(self):
        sid = self.sandbox(["/bin/sh", "-c", "sleep 0.5; exit 7"], labels={"suite": "python"})
        self.assertEqual(self.c.get(sid).state, pb.SANDBOX_STATE_CREATED)
        self.c.start(sid)
        self.assertEqual(self.c.get(sid).state, pb.SANDBOX_STATE_RUNNING)
        self.assertIn(sid, [s.id for s in self.c.list({"suite": "python"})])
        self.assertNotIn(sid, [s.id for s in self.c.list({"suite": "other"})])
        out, err, status = self.collect(self.c.exec(sid, ["/bin/sh", "-c", "echo out; echo err >&2"]))
        self.assertEqual((out, err, exit_code(status)), (b"out\n", b"err\n", 0))
        status = self.c.wait(sid, timeout=60)
        self.assertEqual(status.code, 7)
        self.assertEqual(self.c.get(sid).state, pb.SANDBOX_STATE_STOPPED)
        self.assertEqual(self.c.destroy(sid).code, 7)
        with self.assertRaises(grpc.RpcError) as e:
            self.c.get(sid)
        self.assertEqual(e.exception.code(), grpc.StatusCode.NOT_FOUND)

    def test_exec_streams_output_before_the_exit(self):
        sid = self.sandbox()
        self.c.start(sid)
        seen = []
        for kind, value in self.c.exec(sid, ["/bin/sh", "-c", "echo first; sleep 1.5; echo second"]):
            seen.append((kind, value, time.monotonic()))
        kinds = [k for k, _, _ in seen]
        self.assertEqual(kinds[0], "pid")
        self.assertGreater(seen[0][1], 1)  # not the init
        first = next(t for k, v, t in seen if k == "stdout" and v.startswith(b"first"))
        end = next(t for k, _, t in seen if k == "exit")
        self.assertGreater(end - first, 1.0, "the first line came with the exit, not before")

    def test_stdin_exit_codes_and_signals(self):
        sid = self.sandbox()
        self.c.start(sid)
        out, _, status = self.collect(self.c.exec(sid, ["/bin/cat"], stdin=b"through stdin\n"))
        self.assertEqual((out, exit_code(status)), (b"through stdin\n", 0))
        chunks = (b"%d\n" % i for i in range(1000))
        out, _, _ = self.collect(self.c.exec(sid, ["/usr/bin/wc", "-l"], stdin=chunks))
        self.assertEqual(out.strip(), b"1000")
        _, _, status = self.collect(self.c.exec(sid, ["/bin/sh", "-c", "exit 3"]))
        self.assertEqual(exit_code(status), 3)
        _, _, status = self.collect(self.c.exec(sid, ["/bin/sh", "-c", "kill -9 $$"]))
        self.assertEqual((status.signal, exit_code(status)), (9, 137))

    def test_exec_env_and_cwd(self):
        sid = self.sandbox()
        self.c.start(sid)
        out, _, _ = self.collect(self.c.exec(sid, ["/bin/sh", "-c", "echo $V; pwd"],
                                             env={"V": "from env"}, cwd="/tmp"))
        self.assertEqual(out, b"from env\n/tmp\n")

    def test_signal_and_logs(self):
        sid = self.sandbox(["/bin/sh", "-c", "echo started; exec sleep 1000"])
        self.c.start(sid)
        deadline = time.monotonic() + 30
        while b"started" not in b"".join(v for _, v in self.c.logs(sid)):
            self.assertLess(time.monotonic(), deadline, "no output in the logs")
            time.sleep(0.05)
        self.c.signal(sid, 15)
        status = self.c.wait(sid, timeout=60)
        self.assertEqual(status.signal, 15)

    def test_run_in_one_call(self):
        events = list(self.c.run(["/bin/sh", "-c", "echo hello; exit 5"], labels={"suite": "run"}))
        self.assertEqual(events[0][0], "id")
        sid = events[0][1]
        out, _, status = self.collect(events)
        self.assertEqual((out, exit_code(status)), (b"hello\n", 5))
        self.assertNotIn(sid, [s.id for s in self.c.list()])  # removed by the daemon

    def test_wait_deadline(self):
        sid = self.sandbox()
        self.c.start(sid)
        with self.assertRaises(grpc.RpcError) as e:
            self.c.wait(sid, timeout=0.3)
        self.assertEqual(e.exception.code(), grpc.StatusCode.DEADLINE_EXCEEDED)

    def test_errors_are_rpc_errors_with_codes(self):
        with self.assertRaises(grpc.RpcError) as e:
            self.c.create(["/bin/true"], platform="no-such-platform")
        self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("platform", e.exception.details())
        with self.assertRaises(grpc.RpcError) as e:
            self.c.start("no-such-sandbox")
        self.assertEqual(e.exception.code(), grpc.StatusCode.NOT_FOUND)

    def raw_call(self, method, request):
        """A unary call with hand-encoded messages: Debian ships no Python
        modules for grpc.health.v1 or reflection."""
        channel = grpc.insecure_channel("unix:" + SOCKET)
        self.addCleanup(channel.close)
        call = channel.unary_unary(method, request_serializer=None, response_deserializer=None)
        return call(request, timeout=30)

    def test_health_answers_for_the_service_by_name(self):
        # HealthCheckRequest{service: "sandboxd.v1.Sandboxes"} -> {status: SERVING}
        name = b"sandboxd.v1.Sandboxes"
        reply = self.raw_call("/grpc.health.v1.Health/Check", b"\x0a" + bytes([len(name)]) + name)
        self.assertEqual(reply, b"\x08\x01")
        with self.assertRaises(grpc.RpcError) as e:
            self.raw_call("/grpc.health.v1.Health/Check", b"\x0a\x03xyz")
        self.assertEqual(e.exception.code(), grpc.StatusCode.NOT_FOUND)

    def test_server_reflection_lists_the_service(self):
        # ServerReflectionRequest{list_services: ""}: the reply names the services.
        channel = grpc.insecure_channel("unix:" + SOCKET)
        self.addCleanup(channel.close)
        call = channel.stream_stream(
            "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
            request_serializer=None, response_deserializer=None)
        replies = b"".join(call(iter([b"\x3a\x00"]), timeout=30))
        self.assertIn(b"sandboxd.v1.Sandboxes", replies)
        self.assertIn(b"grpc.health.v1.Health", replies)

    def test_capabilities_carry_the_version(self):
        caps = self.c.stub.Capabilities(pb.CapabilitiesRequest())
        self.assertRegex(caps.version, r"^[0-9]+\.[0-9]+\.[0-9]+$")
        self.assertEqual((caps.update, caps.pause, caps.resume), (True, True, True))

    def nproc(self, sid):
        out, _, status = self.collect(self.c.exec(sid, ["/usr/bin/nproc"]))
        self.assertEqual(exit_code(status), 0)
        return int(out)

    def test_update_and_lift_limits(self):
        sid = self.sandbox()
        self.c.start(sid)
        host = self.nproc(sid)
        now = self.c.update(sid, pids=50, cpu_millis=1000)
        self.assertEqual((now.pids, now.cpu_millis), (50, 1000))
        self.assertEqual(self.c.get(sid).spec.limits.pids, 50)
        self.assertEqual(self.nproc(sid), 1)
        now = self.c.update(sid, unlimited=["cpu", "pids"])
        self.assertEqual((now.pids, now.cpu_millis), (0, 0))
        self.assertEqual(self.nproc(sid), host)
        with self.assertRaises(grpc.RpcError) as e:
            self.c.update(sid, pids=5, unlimited=["pids"])
        self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("limits.pids", e.exception.details())
        with self.assertRaises(ValueError):
            self.c.update(sid, unlimited=["swap"])

    def test_pause_and_resume(self):
        sid = self.sandbox(["/bin/sh", "-c", "while :; do date +%s%N > /tmp/t; sleep 0.05; done"])
        self.c.start(sid)
        self.c.pause(sid)
        self.assertEqual(self.c.get(sid).state, pb.SANDBOX_STATE_PAUSED)
        for pid in self.c.get(sid).sentry_pids:
            with open("/proc/%d/stat" % pid) as f:
                self.assertEqual(f.read().rsplit(")", 1)[1].split()[0], "T", pid)
        with self.assertRaises(grpc.RpcError) as e:
            self.collect(self.c.exec(sid, ["/bin/true"]))
        self.assertEqual(e.exception.code(), grpc.StatusCode.FAILED_PRECONDITION)
        with self.assertRaises(grpc.RpcError) as e:
            self.c.pause(sid)
        self.assertEqual(e.exception.code(), grpc.StatusCode.FAILED_PRECONDITION)
        self.c.resume(sid)
        self.assertEqual(self.c.get(sid).state, pb.SANDBOX_STATE_RUNNING)
        _, _, status = self.collect(self.c.exec(sid, ["/bin/true"]))
        self.assertEqual(exit_code(status), 0)

    def test_the_generated_modules_are_the_package_s(self):
        self.assertTrue(hasattr(sandboxd_client.sandbox_pb2_grpc, "SandboxesStub"))
        self.assertEqual(pb.DESCRIPTOR.package, "sandboxd.v1")


if __name__ == "__main__":
    SOCKET = sys.argv.pop(1)
    unittest.main(verbosity=2)
