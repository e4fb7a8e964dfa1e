"""sbx_cc_proto_library: C++ (and gRPC) code from .proto files, offline.

Runs Debian's /usr/bin/protoc and /usr/bin/grpc_cpp_plugin in a genrule (no
@com_google_protobuf, nothing downloaded) and wraps the output in a
cc_library linked against the system @protobuf (and @grpcpp).

    load("//tools/bazel:proto.bzl", "sbx_cc_proto_library")
    sbx_cc_proto_library(
        name = "sbx_proto",
        srcs = ["sandbox.proto", "control.proto"],
        grpc = True,
    )

Generated headers are included as "<package>/<file>.pb.h" (and .grpc.pb.h),
exactly as in the CMake lane, e.g. #include "proto/sandbox.pb.h".
Imports are written relative to the workspace root ("proto/sandbox.proto");
well-known types (google/protobuf/*.proto) come from /usr/include.
`deps` are other sbx_cc_proto_library targets whose .proto files are imported.
"""

PROTOC = "/usr/bin/protoc"
GRPC_CPP_PLUGIN = "/usr/bin/grpc_cpp_plugin"

def sbx_cc_proto_library(name, srcs, deps = [], grpc = False, visibility = None):
    pkg = native.package_name()
    stems = [s[:-len(".proto")] for s in srcs]
    outs = []
    for s in stems:
        outs += [s + ".pb.h", s + ".pb.cc"]
        if grpc:
            outs += [s + ".grpc.pb.h", s + ".grpc.pb.cc"]

    # The .proto files of this library and everything it imports.
    native.filegroup(
        name = name + "_protos",
        srcs = srcs + [d + "_protos" for d in deps],
        visibility = visibility,
    )

    paths = " ".join([(pkg + "/" + s) if pkg else s for s in srcs])
    cmd = "%s -I. --cpp_out=$(GENDIR)" % PROTOC
    if grpc:
        cmd += " --grpc_out=$(GENDIR) --plugin=protoc-gen-grpc=%s" % GRPC_CPP_PLUGIN
    cmd += " " + paths

    native.genrule(
        name = name + "_gen",
        srcs = [":" + name + "_protos"],
        outs = outs,
        cmd = cmd,
        message = "protoc %s" % paths,
    )

    native.cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = [o for o in outs if o.endswith(".h")],
        # Generated code: do not apply the project's warning flags.
        copts = ["-w"],
        deps = deps + ["@protobuf"] + (["@grpcpp"] if grpc else []),
        visibility = visibility,
    )
