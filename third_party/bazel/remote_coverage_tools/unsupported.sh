#!/bin/sh
echo "coverage is not supported by the offline Bazel lane (see third_party/bazel/README.md)" >&2
exit 1
