#!/bin/sh
# The real coverage tools are a download; this offline stub only explains their absence.
echo "remote_coverage_tools is an offline stub (third_party/remote_coverage_tools): bazel coverage is not supported here" >&2
exit 1
