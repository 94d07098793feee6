r"""Builds the multilingual X->English corpus (TFDS `gettext_m4`) into a data directory.

Default: every gettext catalog under /usr/share/locale, the 100 largest languages.

  python -m lingvo_gshard.tools.prepare_data --data_dir=/tmp/gshard_data
  python -m lingvo_gshard.tools.prepare_data --data_dir=... --debian_l10n   # + pinned Debian packages
  python -m lingvo_gshard.tools.prepare_data --data_dir=... --nogettext \
      --tsv=de=/data/de-en.tsv,fr=/data/fr-en.tsv
  python -m lingvo_gshard.tools.prepare_data --data_dir=... --nogettext --tfds=wmt19_translate/de-en
  python -m lingvo_gshard.tools.prepare_data --data_dir=... --nogettext --tfds=wmt19_translate/de-en \
      --tfds_train_split=train --tfds_dev_split=validation --tfds_test_split=test   # its own splits, streamed
  python -m lingvo_gshard.tools.prepare_data --data_dir=/tmp/gshard_data --verify   # every file's sha256

Prints a per-language summary and the skip report; bad input exits 1 with one line naming the problem.
"""
import contextlib
import os
import sys

from absl import app
from absl import flags

from lingvo_gshard.data import build
from lingvo_gshard.data import cleaning
from lingvo_gshard.data import corpus
from lingvo_gshard.data import debian
from lingvo_gshard.data import directions
from lingvo_gshard.data import integrity
from lingvo_gshard.data import language_codes
from lingvo_gshard.data import report
from lingvo_gshard.data import sources
from lingvo_gshard.data import tfds_published
from lingvo_gshard.tools import _common
from lingvo_gshard.utils import files

_DATA_DIR = flags.DEFINE_string('data_dir', None, 'TFDS data directory to build into.', required=True)
_GETTEXT = flags.DEFINE_bool('gettext', True, 'Read gettext catalogs under --locale_roots.')
_LOCALE_ROOTS = flags.DEFINE_list('locale_roots', list(sources.DEFAULT_LOCALE_ROOTS),
                                  'Directories laid out like /usr/share/locale.')
_DEBIAN_L10N = flags.DEFINE_bool('debian_l10n', False,
                                 'Also fetch the pinned Debian packages (debian.L10N_PACKAGES) with '
                                 '`apt-get download` and read their catalogs (needs apt-get update).')
_DEBIAN_PACKAGES = flags.DEFINE_list('debian_packages', [],
                                     'Extra Debian packages (name or name=version) to fetch and read.')
_DEBS = flags.DEFINE_list('debs', [], 'Local .deb files whose catalogs are read.')
_DEB_CACHE = flags.DEFINE_string('deb_cache_dir', '/var/cache/lingvo_gshard/debs',
                                 'Where fetched .deb files are kept (not fetched again).')
_TSV = flags.DEFINE_list('tsv', [], 'LANG=PATH files of source<TAB>target lines into English (de=...), or '
                         'SOURCE-TARGET=PATH for any direction (en-de=..., de-fr=...).')
_DIRECTION = flags.DEFINE_enum('direction', 'xx-en', directions.DIRECTIONS,
                               'What X->English inputs (catalogs, LANG=PATH files, datasets) become: themselves, '
                               'reversed (English->X), or both.')
_TFDS = flags.DEFINE_list('tfds', [], 'TFDS translation datasets, e.g. wmt19_translate/de-en.')
_TFDS_SPLIT = flags.DEFINE_string('tfds_split', 'train', 'Split of the --tfds datasets to read.')
_TFDS_DATA_DIR = flags.DEFINE_string('tfds_data_dir', None, 'data_dir for the --tfds datasets.')
_TFDS_TRAIN = flags.DEFINE_string('tfds_train_split', '', 'With one --tfds dataset: keep its own splits, this '
                                  'one as the corpus\' train (streamed; no re-split, no dedup, no cap).')
_TFDS_DEV = flags.DEFINE_string('tfds_dev_split', '', 'The dataset\'s split that is the corpus\' dev '
                                '(e.g. validation); needs --tfds_train_split.')
_TFDS_TEST = flags.DEFINE_string('tfds_test_split', '', 'The dataset\'s split that is the corpus\' test '
                                 '(e.g. test); needs --tfds_train_split.')
_TFDS_MAX_PAIRS = flags.DEFINE_integer('tfds_max_pairs', 0, 'With --tfds_train_split: at most this many pairs '
                                       'per language and split (0: all).', lower_bound=0)
_NUM_LANGUAGES = flags.DEFINE_integer('num_languages', 100, 'Keep the N largest languages.', lower_bound=1)
_LANGUAGES = flags.DEFINE_list('languages', [], 'Keep exactly these languages (tags or locales; each in every '
                               'direction built) or directions (fr-en, en-fr).')
_NEW_LANGUAGES = flags.DEFINE_list(
    'new_languages', [], 'Language tags the IANA registry lacks that --tsv or --languages name on purpose '
    '(a language of your own); recorded in the manifest. Any other unregistered code is refused.')
_DEV_FRACTION = flags.DEFINE_float('dev_fraction', 0.03, 'Fraction of English sentences held out as dev.',
                                   lower_bound=0.0, upper_bound=0.5)
_TEST_FRACTION = flags.DEFINE_float('test_fraction', 0.03, 'Fraction of English sentences held out as test.',
                                    lower_bound=0.0, upper_bound=0.5)
_MAX_DEV = flags.DEFINE_integer('max_dev', 1000, 'Most dev pairs per language (the rest are unused).', lower_bound=0)
_MAX_TEST = flags.DEFINE_integer('max_test', 1000, 'Most test pairs per language (the rest are unused).', lower_bound=0)
_MIN_TRAIN = flags.DEFINE_integer('min_train', 1, 'Drop languages with fewer training pairs.', lower_bound=1)
_MAX_CHARS = flags.DEFINE_integer('max_chars', cleaning.DEFAULT_MAX_CHARS, 'Longest side kept (chars).', lower_bound=1)
_FORCE = flags.DEFINE_bool('force', False, 'Rebuild even if the data dir is up to date.')
_VERIFY = flags.DEFINE_bool('verify', False, 'Build nothing: check that every file of the build in --data_dir '
                            'is there with the size and sha256 it was written with; one line per bad file.')


def _Log(line):
  print(line, file=sys.stderr, flush=True)


def _Sources():
  srcs = []
  if _GETTEXT.value:
    packages = list(_DEBIAN_PACKAGES.value) + (list(debian.L10N_PACKAGES) if _DEBIAN_L10N.value else [])
    debs = list(_DEBS.value)
    if packages:
      _Log(f'fetching {len(packages)} Debian packages into {_DEB_CACHE.value}...')
      debs += debian.FetchDebs(packages, _DEB_CACHE.value)
    srcs.append(sources.GettextSource(_LOCALE_ROOTS.value, debs, max_chars=_MAX_CHARS.value))
  if _TSV.value:
    files = sources.ParseLanguageFiles(_TSV.value, '--tsv', _NEW_LANGUAGES.value)
    srcs.append(sources.TsvSource(files, max_chars=_MAX_CHARS.value))
  published = _PublishedSplits()
  for name in _TFDS.value:
    if published:
      srcs.append(tfds_published.PublishedTfds(name, published, _TFDS_DATA_DIR.value, max_chars=_MAX_CHARS.value,
                                               max_pairs=_TFDS_MAX_PAIRS.value))
    else:
      srcs.append(sources.TfdsSource(name, _TFDS_SPLIT.value, _TFDS_DATA_DIR.value, max_chars=_MAX_CHARS.value))
  if not srcs:
    raise report.DataError('no input: --nogettext without --tsv or --tfds')
  return srcs


def _PublishedSplits():
  """{corpus split: the dataset's split} of --tfds_*_split ({}: the --tfds datasets are re-split)."""
  given = {'train': _TFDS_TRAIN.value, 'dev': _TFDS_DEV.value, 'test': _TFDS_TEST.value}
  return {k: v for k, v in given.items() if v}


def _CheckPublished():
  published = _PublishedSplits()
  if not published:
    if _TFDS_MAX_PAIRS.value:
      raise report.DataError('--tfds_max_pairs caps a dataset read with its own splits: give --tfds_train_split')
    return
  if 'train' not in published:
    raise report.DataError('--tfds_dev_split/--tfds_test_split name the dataset\'s own splits: give '
                           '--tfds_train_split too')
  if len(_TFDS.value) != 1 or _GETTEXT.value or _TSV.value:
    raise report.DataError('--tfds_train_split reads one --tfds dataset with its own splits, as the only input '
                           '(add --nogettext, leave out --tsv)')
  if _TFDS_SPLIT.value != 'train':
    raise report.DataError('--tfds_split re-splits one split of the dataset; --tfds_train_split keeps its own '
                           'splits: give one or the other')


def Summary(manifest):
  """The per-language table and skip report of a manifest, as text."""
  lines = [f'{"lang":<14}{"bucket":<8}{"train":>9}{"dev":>7}{"test":>7}{"inputs":>8}']
  for tag, info in manifest['languages'].items():
    lines.append(f'{tag:<14}{info["bucket"]:<8}{info["train"]:>9}{info["dev"]:>7}{info["test"]:>7}'
                 f'{info["inputs"]:>8}')
  totals = manifest['totals']
  langs = manifest['languages']
  lines.append(f'{len(langs)} languages; train {totals["train"]}, dev {totals["dev"]}, test {totals["test"]}'
               f' pairs; largest {next(iter(langs))} ({max(l["train"] for l in langs.values())}), smallest '
               f'{list(langs)[-1]} ({min(l["train"] for l in langs.values())}) training pairs')
  left = manifest['left_out_languages']
  if left:
    shown = ', '.join(f'{t} ({n})' for t, n in list(left.items())[:12])
    lines.append(f'left out: {len(left)} smaller languages: {shown}{", ..." if len(left) > 12 else ""}')
  lines.append('skipped: ' + ', '.join(f'{k} {v}' for k, v in manifest['skips'].items()))
  for item in manifest['skipped_files'][:10]:
    lines.append(f'  skipped file {item["path"]}: {item["reason"]}')
  if len(manifest['skipped_files']) > 10:
    lines.append(f'  ... {len(manifest["skipped_files"]) - 10} more skipped files listed in manifest.json')
  for item in manifest['notes'][:10]:
    lines.append(f'  note {item["path"]}: {item["note"]}')
  lines.append(f'inputs: {len(manifest["sources"])}; built {manifest["built_at"]} in '
               f'{manifest["build_seconds"]}s')
  return '\n'.join(lines)


def _Verify(data_dir):
  try:
    manifest = build.ReadManifest(data_dir)
  except report.DataError as e:
    print(f'prepare_data: error: {e}', file=sys.stderr)
    return 1
  if manifest is None:
    print(f'prepare_data: error: {data_dir}: no finished build to verify', file=sys.stderr)
    return 1
  files = manifest.get(integrity.FILES)
  if not files:
    print(f'prepare_data: error: {data_dir}: its manifest records no file checksums (built before they '
          'were kept); rebuild with --force to record them', file=sys.stderr)
    return 1
  problems = integrity.Verify(data_dir, manifest)
  for line in problems:
    print(f'prepare_data: {line}', file=sys.stderr)
  total = sum(info['bytes'] for info in files.values())
  print(f'{len(files) - len(problems)} of {len(files)} files ({total / 1e6:.1f} MB) as built: '
        + ('OK' if not problems else f'{len(problems)} bad'))
  return 1 if problems else 0


def _CheckedConfig():
  """The corpus settings, with every language code, input path and the data directory checked before the
  build reads or creates anything (raises report.DataError naming the flag)."""
  new = tuple(language_codes.CheckDeclared(_NEW_LANGUAGES.value))
  wanted = tuple(sources.CheckDirection(code, f'--languages={code}', new) for code in _LANGUAGES.value)
  for tag, path in sources.ParseLanguageFiles(_TSV.value, '--tsv', new):
    if not os.path.isfile(path) or not os.access(path, os.R_OK):
      raise report.DataError(f'--tsv={tag}={path}: no such readable file')
  for root in _LOCALE_ROOTS.value if _GETTEXT.value else ():
    if not os.path.isdir(root):
      raise report.DataError(f'--locale_roots={root}: no such directory')
  _CheckPublished()
  files.CheckWritableDir(_DATA_DIR.value, '--data_dir')
  config = corpus.CorpusConfig(
      num_languages=_NUM_LANGUAGES.value, languages=wanted, dev_fraction=_DEV_FRACTION.value,
      test_fraction=_TEST_FRACTION.value, max_dev=_MAX_DEV.value, max_test=_MAX_TEST.value,
      min_train=_MIN_TRAIN.value, new_languages=new, direction=_DIRECTION.value)
  config.Validate()
  return config


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  if _VERIFY.value:
    return _Verify(_DATA_DIR.value)
  try:
    config = _CheckedConfig()
    # TFDS prints its own progress on stdout; stdout is kept for the summary.
    with contextlib.redirect_stdout(sys.stderr):
      manifest, built = build.Build(_DATA_DIR.value, _Sources(), config, force=_FORCE.value, log=_Log)
  except (report.DataError, ValueError) as e:
    print(f'prepare_data: error: {e}', file=sys.stderr)
    return 1
  print(Summary(manifest))
  print(f'{"built" if built else "up to date"}: {_DATA_DIR.value}')
  return 0


def run():
  """The console script's entry point."""
  _common.Main('prepare_data', main)


if __name__ == '__main__':
  run()
