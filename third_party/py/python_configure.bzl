"""A Python toolchain for the interpreter that has TensorFlow installed, found on this machine at fetch time.

Bazel 4's default toolchain runs whatever `python3` the test's PATH gives; under pyenv that is a shim which
may pick another interpreter inside Bazel's environment. This rule asks the interpreter for its real path
(`sys.executable`) once, and pins the toolchain to it. Override with PYTHON_BIN_PATH=/path/to/python3.
"""

_BUILD = """\
load("@bazel_tools//tools/python:toolchain.bzl", "py_runtime_pair")

py_runtime(
    name = "py3_runtime",
    interpreter_path = "{interpreter}",
    python_version = "PY3",
)

py_runtime_pair(
    name = "runtime_pair",
    py3_runtime = ":py3_runtime",
)

toolchain(
    name = "toolchain",
    toolchain = ":runtime_pair",
    toolchain_type = "@bazel_tools//tools/python:toolchain_type",
)
"""

# Imports the project's tests cannot run without; a missing one is reported at fetch time, not per test.
_CHECK = "import sys; print(sys.executable); import tensorflow, pytest"

def _local_python_impl(ctx):
    python = ctx.os.environ.get("PYTHON_BIN_PATH") or ctx.which("python3")
    if not python:
        fail("no python3 on PATH; set PYTHON_BIN_PATH to the interpreter that has TensorFlow installed")
    result = ctx.execute([python, "-c", _CHECK])
    interpreter = result.stdout.strip().split("\n")[0] if result.stdout else ""
    if not interpreter:
        fail("%s did not run: %s" % (python, result.stderr))
    if result.return_code != 0:
        # Still usable for targets that need neither; say so once, here.
        print("WARNING: %s cannot import tensorflow and pytest, which the tests need:\n%s" %
              (interpreter, result.stderr[-500:]))
    ctx.file("WORKSPACE", 'workspace(name = "%s")\n' % ctx.name)
    ctx.file("BUILD", _BUILD.format(interpreter = interpreter))

local_python = repository_rule(
    implementation = _local_python_impl,
    # Re-run when the interpreter choice could change (pyenv shims read PYENV_VERSION).
    environ = ["PYTHON_BIN_PATH", "PATH", "PYENV_VERSION"],
)
