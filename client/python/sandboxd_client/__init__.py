"""Python client of sandboxd's API (gRPC service sandboxd.v1.Sandboxes).

The messages and the stub are generated from proto/sandbox.proto with
Debian's protoc and grpc_python_plugin (modules ``sandbox_pb2`` and
``sandbox_pb2_grpc`` of this package); :class:`Client` is a thin layer over
the stub for the common calls. Every method raises ``grpc.RpcError`` when
the daemon refuses the call (``e.code()``, ``e.details()``).

    from sandboxd_client import Client
    with Client() as c:                      # $SANDBOXD_SOCKET or the default
        sid = c.create(["/bin/sh", "-c", "sleep 100"])
        c.start(sid)
        for stream, data in c.exec(sid, ["/bin/echo", "hi"]):
            ...                              # ("stdout", b"hi\\n"), then ("exit", ExitStatus)
        c.destroy(sid)
"""

from .client import (
    DEFAULT_SOCKET,
    Client,
    exit_code,
    process_spec,
    sandbox_spec,
)
from . import sandbox_pb2, sandbox_pb2_grpc

__all__ = [
    "DEFAULT_SOCKET",
    "Client",
    "exit_code",
    "process_spec",
    "sandbox_spec",
    "sandbox_pb2",
    "sandbox_pb2_grpc",
]
