"""Project macros for the Bazel lane. Each mirrors a CMake function or idiom.

load("//tools/bazel:defs.bzl", "sbx_cc_test", "sbx_daemon_sh_test", "sbx_static_c_program")
"""

def sbx_cc_test(name, srcs, deps = [], data = [], copts = [], size = "small", tags = [], **kwargs):
    """A gtest binary run by `bazel test`. CMake: sbx_test(NAME SRCS ... DEPS ...).

    gtest, gmock and gtest_main are always linked (like PkgConfig::GTEST in
    sbx_test), so a test file needs no main(). The project's own libraries
    are linked statically (linkstatic), as CMake's STATIC libraries are, so
    section-boundary symbols (__start_<section>) and the like behave the same
    in both lanes. Extra keyword arguments (timeout, flaky, shard_count, env,
    ...) go to cc_test unchanged.
    """
    native.cc_test(
        name = name,
        srcs = srcs,
        deps = deps + ["@gtest"],
        data = data,
        copts = copts,
        size = size,
        tags = tags,
        linkstatic = True,
        **kwargs
    )

_STATIC_CC = {
    "gcc": "gcc -static",
    "musl-gcc": "musl-gcc -static",
}

def sbx_static_c_program(name, srcs, cc = "gcc", copts = [], linkopts = [], visibility = None, tags = []):
    """A fully static C program built outside the C++ toolchain, with a genrule.

    For conformance/test programs that run inside a sandbox (and so must not
    need the host's ld.so or libc). cc is "gcc" (glibc, `gcc -static`) or
    "musl-gcc" (musl, from Debian's musl-tools). The output file is `name`.
    srcs may contain .c, .S and .h files; .h files are only made visible.
    Default flags: -O2 -g -Wall; add more with copts/linkopts.
    CMake equivalent: add_custom_command(... COMMAND gcc -static ...).
    """
    if cc not in _STATIC_CC:
        fail("sbx_static_c_program: cc must be one of %s" % _STATIC_CC.keys())
    flags = " ".join(["-O2", "-g", "-Wall"] + copts)
    native.genrule(
        name = name + "_gen",
        srcs = srcs,
        outs = [name],
        cmd = "%s %s -o $@ $$(for f in $(SRCS); do case $$f in *.h) ;; *) echo $$f;; esac; done) %s" % (
            _STATIC_CC[cc],
            flags,
            " ".join(linkopts),
        ),
        message = "Linking static C program (%s) %s" % (cc, name),
        visibility = visibility,
        tags = tags,
    )

def sbx_daemon_sh_test(name, srcs, extra_args = [], data = [], size = "medium", **kwargs):
    """A shell test of test/ against a real sandboxd, as CTest runs it.

    Its arguments are SANDBOXD SANDBOXCTL SENTRY (then `extra_args`), and
    lib.sh and the three binaries are its data (then `data`). Extra
    keyword arguments (tags, env, ...) go to sh_test unchanged.
    """
    native.sh_test(
        name = name,
        srcs = srcs,
        size = size,
        args = [
            "$(location //daemon:sandboxd)",
            "$(location //client:sandboxctl)",
            "$(location //sentry:sentry)",
        ] + extra_args,
        data = [
            "lib.sh",
            "//client:sandboxctl",
            "//daemon:sandboxd",
            "//sentry:sentry",
        ] + data,
        **kwargs
    )
