"""The commands the docs tell a reader to run name modules that exist and only flags those modules define.

Reads the fenced bash/sh/shell blocks of README.md, docs/guides/*.md and docs/experiments/**/reproduce.md,
finds every `python -m lingvo_gshard.<module>` and every console script of setup.py (`gshard_<tool>`), and
checks the module's file exists; for a tool, every `--flag` (or `--noflag` of a boolean) must be one that
tools/<tool>.py (or tools/_common.py, if it imports it) defines with flags.DEFINE_*, or one of absl's own.
The sources are read with `ast`, nothing is imported: no TensorFlow, well under a second.

Also: every relative link of those pages and of docs/**/*.md leads to a file or directory that exists.
"""
import ast
import glob
import os
import re
import shlex

import pytest

# Under `bazel test` this file sits in a runfiles tree; BUILD there is a symlink to the real checkout, whose
# docs/ and setup.py this test reads (as tests/build_targets_test.py does).
_REPO = os.path.dirname(os.path.realpath(
    os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'BUILD')))

# absl's own flags (absl.flags, absl.app, absl.logging): every tool accepts them.
_ABSL_FLAGS = {'flagfile', 'undefok', 'log_dir', 'verbosity', 'v', 'logger_levels', 'stderrthreshold',
               'profile_file'}
_ABSL_BOOLS = {'help', 'helpshort', 'helpfull', 'helpxml', 'only_check_args', 'pdb', 'pdb_post_mortem',
               'run_with_pdb', 'run_with_profiling', 'use_cprofile_for_profiling', 'logtostderr',
               'alsologtostderr', 'showprefixforinfo'}
# Installed package -> folder of the checkout (setup.py's _MAPPED).
_PACKAGE_DIRS = {'lingvo_gshard.params': 'params', 'lingvo_gshard.data': 'data', 'lingvo_gshard.tools': 'tools',
                 'lingvo_gshard': 'lingvo_gshard'}
# Fewer commands than this means the extraction broke, not that the docs are right.
_MIN_TOOL_COMMANDS = 50
_MIN_PAGES_WITH_COMMANDS = 8

_FENCE = re.compile(r'^```(?:bash|sh|shell)[ \t]*\n(.*?)^```', re.M | re.S)
_SEPARATORS = {';', '&&', '||', '|', '&', '(', ')', ';;'}


def _Pages():
  pages = ['README.md'] + sorted(glob.glob('docs/guides/*.md', root_dir=_REPO))
  pages += sorted(glob.glob('docs/experiments/**/reproduce.md', root_dir=_REPO, recursive=True))
  return pages


def _StripComment(line):
  """The line without a shell comment: a '#' outside quotes at the start of a word."""
  quote = None
  for i, ch in enumerate(line):
    if quote:
      if ch == quote:
        quote = None
    elif ch in '\'"':
      quote = ch
    elif ch == '#' and (i == 0 or line[i - 1].isspace()):
      return line[:i]
  return line


def _Commands(text):
  """(shell line, [tokens of one simple command], ...) of every fenced shell block of `text`."""
  out = []
  for block in _FENCE.findall(text):
    for line in block.replace('\\\n', ' ').splitlines():
      line = _StripComment(line).strip()
      if not line:
        continue
      lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
      lexer.whitespace_split = True
      lexer.commenters = ''
      try:
        tokens = list(lexer)
      except ValueError as e:  # unbalanced quotes
        out.append((line, None, str(e)))
        continue
      segment = []
      for token in tokens + [';']:
        if token in _SEPARATORS:
          if segment:
            out.append((line, segment, None))
          segment = []
        else:
          segment.append(token)
  return out


def _ConsoleScripts():
  """{'gshard_trainer': 'lingvo_gshard.tools.trainer', ...} from setup.py's entry_points."""
  tree = ast.parse(open(os.path.join(_REPO, 'setup.py')).read())
  scripts = {}
  for node in ast.walk(tree):
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and re.fullmatch(
        r'\s*[\w.-]+\s*=\s*[\w.]+:\w+\s*', node.value):
      name, target = (s.strip() for s in node.value.split('='))
      scripts[name] = target.split(':')[0]
  return scripts


def _ModuleFile(module):
  """The checkout's file that `python -m module` runs (lingvo_gshard.X.Y -> its folder's X/Y.py), or None."""
  for package in sorted(_PACKAGE_DIRS, key=len, reverse=True):
    if module == package or module.startswith(package + '.'):
      rest = module[len(package) + 1:].split('.') if module != package else []
      base = os.path.join(_REPO, _PACKAGE_DIRS[package], *rest)
      candidates = ([base + '.py'] if rest else []) + [os.path.join(base, '__main__.py')]
      return next((path for path in candidates if os.path.isfile(path)), None)
  return None


def _Extras():
  """The extras_require names of setup.py (`pip install -e '.[NAME]'`)."""
  tree = ast.parse(open(os.path.join(_REPO, 'setup.py')).read())
  for node in ast.walk(tree):
    if isinstance(node, ast.keyword) and node.arg == 'extras_require' and isinstance(node.value, ast.Dict):
      return {k.value for k in node.value.keys if isinstance(k, ast.Constant)}
  return set()


_FLAGS_CACHE = {}


def _DefinedFlags(path):
  """({flag names}, {boolean flag names}) that the file at `path` defines with flags.DEFINE_*."""
  if path not in _FLAGS_CACHE:
    names, bools = set(), set()
    for node in ast.walk(ast.parse(open(path).read())):
      if not isinstance(node, ast.Call):
        continue
      func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, 'id', '')
      if not func.startswith('DEFINE_'):
        continue
      arg = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == 'name'), None)
      if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        names.add(arg.value)
        if func in ('DEFINE_bool', 'DEFINE_boolean'):
          bools.add(arg.value)
    _FLAGS_CACHE[path] = (names, bools)
  return _FLAGS_CACHE[path]


def _ToolFlags(tool_path):
  names, bools = set(_DefinedFlags(tool_path)[0]), set(_DefinedFlags(tool_path)[1])
  source = open(tool_path).read()
  if re.search(r'^from lingvo_gshard\.tools import .*\b_common\b|^import lingvo_gshard\.tools\._common', source,
               re.M):
    common = _DefinedFlags(os.path.join(_REPO, 'tools', '_common.py'))
    names |= common[0]
    bools |= common[1]
  return names | _ABSL_FLAGS | _ABSL_BOOLS, bools | _ABSL_BOOLS


def _Invocation(segment, scripts):
  """(module, args) of a `python -m lingvo_gshard...` or console-script command in `segment`, else None."""
  for i, token in enumerate(segment):
    if token in ('python', 'python3'):
      if segment[i + 1:i + 2] == ['-m'] and i + 2 < len(segment) and segment[i + 2].startswith('lingvo_gshard'):
        return segment[i + 2], segment[i + 3:]
      return None
    if token in scripts:
      return scripts[token], segment[i + 1:]
  return None


def _Check(page, text=None):
  """(commands found, [failure messages]) of one page (or of `text`, as if it were that page)."""
  text = open(os.path.join(_REPO, page)).read() if text is None else text
  scripts = _ConsoleScripts()
  found, failures = 0, []
  for line, segment, error in _Commands(text):
    if error:
      failures.append(f'{page}: `{line}`: cannot be parsed as shell ({error})')
      continue
    if 'pip' in segment and 'install' in segment:
      for token in segment:
        for extra in re.findall(r'^\.\[([\w,-]+)\]$', token):
          unknown = set(extra.split(',')) - _Extras()
          if unknown:
            failures.append(f'{page}: `{" ".join(segment)}`: setup.py has no extra {", ".join(sorted(unknown))}')
    invocation = _Invocation(segment, scripts)
    if invocation is None:
      continue
    module, args = invocation
    found += 1
    command = ' '.join(segment)
    path = _ModuleFile(module)
    if path is None:
      failures.append(f'{page}: `{command}`: no module {module} in the checkout')
      continue
    if not module.startswith('lingvo_gshard.tools.'):
      continue
    names, bools = _ToolFlags(path)
    for arg in args:
      if not arg.startswith('--') or arg == '--':
        continue
      flag = arg[2:].split('=', 1)[0]
      if flag in names or (flag.startswith('no') and flag[2:] in bools and '=' not in arg):
        continue
      failures.append(f'{page}: `{command}`: --{flag} is not a flag of {os.path.relpath(path, _REPO)}')
  return found, failures


@pytest.mark.parametrize('page', _Pages())
def test_every_command_names_an_existing_module_and_its_flags(page):
  _, failures = _Check(page)
  assert not failures, '\n'.join(failures)


def test_the_docs_hold_enough_commands_for_the_check_to_mean_something():
  counts = {page: _Check(page)[0] for page in _Pages()}
  assert sum(counts.values()) >= _MIN_TOOL_COMMANDS, counts
  assert sum(1 for n in counts.values() if n) >= _MIN_PAGES_WITH_COMMANDS, counts
  assert counts['README.md'] >= 3, 'the main job: prepare_data, trainer, evaluate'


def test_the_checker_catches_an_unknown_flag_and_module():
  text = ('```bash\npython -m lingvo_gshard.tools.trainer --model=X --no_such_flag=1 && '
          'gshard_evaluate --nosuchbool\npython -m lingvo_gshard.tools.no_such_tool\n```\n')
  found, failures = _Check('page.md', text + "```sh\ngshard_trainer --nojit --model=X \\\n  --logdir=/tmp/x  # ok\n"
                           "python -m pip install -e '.[no_such_extra]'\n```\n")
  assert found == 4
  assert failures == [
      'page.md: `python -m lingvo_gshard.tools.trainer --model=X --no_such_flag=1`: --no_such_flag is not a flag '
      'of tools/trainer.py',
      'page.md: `gshard_evaluate --nosuchbool`: --nosuchbool is not a flag of tools/evaluate.py',
      'page.md: `python -m lingvo_gshard.tools.no_such_tool`: no module lingvo_gshard.tools.no_such_tool in the '
      'checkout',
      "page.md: `python -m pip install -e .[no_such_extra]`: setup.py has no extra no_such_extra"]
  commands = [(l, s) for l, s, _ in _Commands(text)]
  scripts = _ConsoleScripts()
  assert [_Invocation(s, scripts)[0] for _, s in commands] == [
      'lingvo_gshard.tools.trainer', 'lingvo_gshard.tools.evaluate', 'lingvo_gshard.tools.no_such_tool']
  assert _ModuleFile('lingvo_gshard.tools.no_such_tool') is None
  names, bools = _ToolFlags(_ModuleFile('lingvo_gshard.tools.trainer'))
  assert {'model', 'logdir', 'model_params_override', 'helpfull'} <= names and 'no_such_flag' not in names
  assert 'jit' in bools  # --nojit is valid
  assert _StripComment("python -m x --a='#b' --c=${r#*:}  # note") == "python -m x --a='#b' --c=${r#*:}  "
  assert {'test', 'bench', 'plots'} <= _Extras()


_LINK = re.compile(r'\[[^\]]*\]\(([^)\s]+)\)')


def _LinkPages():
  # runs/commentary.md is not a page: m4_report copies it into RESULTS.md, whose links are checked.
  return ['README.md'] + sorted(p for p in glob.glob('docs/**/*.md', root_dir=_REPO, recursive=True)
                                if os.path.basename(p) != 'commentary.md')


@pytest.mark.parametrize('page', _LinkPages())
def test_every_relative_link_leads_somewhere(page):
  text = open(os.path.join(_REPO, page)).read()
  broken = []
  for target in _LINK.findall(text):
    if re.match(r'[a-z]+:', target) or target.startswith('#'):
      continue
    path = os.path.normpath(os.path.join(_REPO, os.path.dirname(page), target.split('#', 1)[0]))
    if not os.path.exists(path):
      broken.append(target)
  assert not broken, f'{page}: links to nothing: {", ".join(broken)}'
