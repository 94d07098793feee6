"""Every tool's flags, generated from their declarations: each numeric flag below or above its bounds, of the
wrong type, each enum flag outside its choices, and an unknown flag are refused while the flags are parsed,
i.e. before main runs and before anything is read, created or written; through the binary, in one line.
"""
import ast
import glob
import json
import os
import subprocess
import sys

import pytest

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TOOLS = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(_REPO, 'tools', '*.py'))
                if not os.path.basename(p).startswith('_') and "__name__ == '__main__'" in open(p).read())

# Imports one tool, then parses each generated bad argument list with its own flags; prints one JSON line:
# [[argument, error type, message], ...] (a case that parses has error type None).
_CASES = r'''
import importlib, json, sys
from absl import flags
tool = sys.argv[1]
module = importlib.import_module('lingvo_gshard.tools.' + tool)
FLAGS = flags.FLAGS
mine = FLAGS.get_flags_for_module(module.__name__)
required = []  # flags the tool requires (required=True), found as the parser names them
while True:
  try:
    FLAGS([tool] + required)
    break
  except flags.IllegalFlagValueError as e:
    name = str(e).split('--', 1)[1].split()[0]
    assert name not in [r[2:].split('=')[0] for r in required], str(e)
    required.append(f'--{name}=/nonexistent')
  finally:
    FLAGS.unparse_flags()
cases = ['--no_such_flag=1']
for f in mine:
  p = f.parser
  kind = type(p).__name__
  if kind in ('IntegerParser', 'FloatParser'):
    cases.append(f'--{f.name}=not-a-number')
    step = 1 if kind == 'IntegerParser' else 0.5
    if p.lower_bound is not None:
      cases.append(f'--{f.name}={p.lower_bound - step}')
    if p.upper_bound is not None:
      cases.append(f'--{f.name}={p.upper_bound + step}')
  elif kind in ('EnumParser', 'EnumClassParser'):
    cases.append(f'--{f.name}=no-such-choice')
out = []
for arg in cases:
  try:
    FLAGS([tool] + required + [arg])
    out.append([arg, None, ''])
  except flags.Error as e:
    out.append([arg, type(e).__name__, ' '.join(str(e).split())])
  FLAGS.unparse_flags()
print(json.dumps(out))
'''


def _Declared(tool):
  """(numeric flags, numeric flags with a bound) that tools/<tool>.py defines, read from its source."""
  tree = ast.parse(open(os.path.join(_REPO, 'tools', f'{tool}.py')).read())
  numeric, bounded = [], []
  for node in ast.walk(tree):
    if isinstance(node, ast.Call) and getattr(node.func, 'attr', '') in ('DEFINE_integer', 'DEFINE_float'):
      numeric.append(node.args[0].value)
      if any(k.arg in ('lower_bound', 'upper_bound') for k in node.keywords):
        bounded.append(node.args[0].value)
  return numeric, bounded


def test_every_numeric_flag_of_every_tool_declares_its_bounds():
  assert len(_TOOLS) >= 13
  for tool in _TOOLS:
    numeric, bounded = _Declared(tool)
    assert numeric == bounded, f'tools/{tool}.py: flags without lower_bound/upper_bound: ' \
                               f'{sorted(set(numeric) - set(bounded))}'


@pytest.mark.parametrize('tool', _TOOLS)
def test_bad_flag_values_are_refused_while_parsing(tool):
  out = subprocess.run([sys.executable, '-c', _CASES, tool], capture_output=True, text=True, timeout=300)
  assert out.returncode == 0, out.stderr[-2000:]
  cases = json.loads(out.stdout.strip().splitlines()[-1])
  assert len(cases) >= 1 + len(_Declared(tool)[0])  # unknown flag + at least one per numeric flag
  for arg, error, message in cases:
    name = arg[2:].split('=')[0]
    assert error is not None, f'{tool} {arg}: accepted'
    assert name in message, (tool, arg, message)


@pytest.mark.parametrize('tool', _TOOLS)
def test_the_binary_says_it_in_one_line_and_touches_nothing(tool, tmp_path):
  numeric, _ = _Declared(tool)
  arg = f'--{numeric[0]}=-1000000' if numeric else '--no_such_flag=1'
  out = subprocess.run([sys.executable, '-m', f'lingvo_gshard.tools.{tool}', arg,
                        f'--data_dir={tmp_path}/data', f'--logdir={tmp_path}/logdir'] if tool == 'trainer' else
                       [sys.executable, '-m', f'lingvo_gshard.tools.{tool}', arg],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
  lines = [l for l in out.stderr.splitlines() if l.strip() and not l.startswith(('WARNING', 'I0000', 'E0000',
                                                                                  'W0000', 'To enable'))]
  assert out.returncode == 1 and len(lines) == 1 and lines[0].startswith(f'{tool}: '), out.stderr[-2000:]
  assert 'Traceback' not in out.stderr
  assert os.listdir(tmp_path) == []  # nothing created, not even the log or data directory


# The flags each tool requires (required=True), so that the stray argument is what is wrong; none of these
# paths exists, and none may be created.
_REQUIRED = {'prepare_data': ['--data_dir={tmp}/data'], 'input_benchmark': ['--data_dir={tmp}/data'],
             'evaluate': ['--model=M4TinyMoE', '--logdir={tmp}/logdir'], 'learning_curves': ['--runs=a={tmp}/a'],
             'trainer': ['--model=M4TinyMoE', '--logdir={tmp}/logdir'],
             'export': ['--model=M4TinyMoE', '--logdir={tmp}/logdir', '--export_dir={tmp}/export'],
             'serving_benchmark': ['--logdir={tmp}/logdir'],
             'expert_map': ['--model=M4TinyMoE', '--logdir={tmp}/logdir'],
             'moe_study_report': ['--study_dir={tmp}/study'], 'router_logits': ['--runs=a={tmp}/a'],
             'tfds_memory_benchmark': ['--work_dir={tmp}/w']}


@pytest.mark.parametrize('tool', _TOOLS)
def test_a_stray_argument_is_one_line_too(tool, tmp_path):
  required = [f.format(tmp=tmp_path) for f in _REQUIRED.get(tool, [])]
  out = subprocess.run([sys.executable, '-m', f'lingvo_gshard.tools.{tool}', 'stray'] + required,
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
  lines = [l for l in out.stderr.splitlines() if l.startswith(f'{tool}: ')]
  assert out.returncode == 1 and lines == [f'{tool}: unexpected arguments: stray'], out.stderr[-2000:]
  assert 'Traceback' not in out.stderr and os.listdir(tmp_path) == []


def test_the_suite_imports_at_most_one_tool_in_its_own_process():
  """Tools define their flags in absl's one global FLAGS, and two tools share flag names (--data_dir, --model):
  a test worker that imported two would fail to collect. Every test file is collected by every worker, so
  across the suite at most one tool (besides _common) may be imported in-process; others run as binaries."""
  imported = {}
  for path in glob.glob(os.path.join(_REPO, 'tests', '*.py')):
    tree = ast.parse(open(path).read())
    for node in ast.walk(tree):
      names = []
      if isinstance(node, ast.ImportFrom) and node.module == 'lingvo_gshard.tools':
        names = [a.name for a in node.names]
      elif isinstance(node, ast.ImportFrom) and (node.module or '').startswith('lingvo_gshard.tools.'):
        names = [node.module.split('.')[2]]
      elif isinstance(node, ast.Import):
        names = [a.name.split('.')[2] for a in node.names if a.name.startswith('lingvo_gshard.tools.')]
      for name in names:
        if name != '_common':
          imported.setdefault(name, []).append(os.path.basename(path))
  assert len(imported) <= 1, imported
