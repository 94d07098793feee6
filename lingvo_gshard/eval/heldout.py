"""Test sets to decode and score: a split of the built corpus, or a directory of `<lang>.tsv` files.

    ts = heldout.FromCorpus('/tmp/gshard_data', 'test', languages=['de', 'fr'], max_sentences=50)
    ts = heldout.FromTsvDir('/data/ui_strings', known_languages=manifest['languages'])
    ts.pairs['de']          # [(source, reference), ...] in file order
    ts.skipped              # {'empty files': 1, ...}: what was left out, counted

A TSV line is `source<TAB>reference` (UTF-8). A file with another column count, bytes that are not UTF-8 or a
language the model does not know is a DataError naming the file and line; an empty file is a counted skip.
"""
import dataclasses
import os
from typing import Dict, List, Optional, Sequence, Tuple

from lingvo_gshard.data import language_codes
from lingvo_gshard.data import reader
from lingvo_gshard.data import report as report_lib
from lingvo_gshard.utils import files


@dataclasses.dataclass
class TestSet:
  name: str                                   # 'test', 'dev', or 'tsv-<directory name>'
  pairs: Dict[str, List[Tuple[str, str]]]     # language -> (source, reference) pairs
  skipped: Dict[str, int] = dataclasses.field(default_factory=dict)


def _Take(pairs, max_sentences):
  return pairs[:max_sentences] if max_sentences else pairs


def FromCorpus(data_dir: str, split: str, languages: Sequence[str] = (), max_sentences: int = 0,
               log=print) -> TestSet:
  """The first `max_sentences` (0 = all) pairs of each language's `split` in the built corpus."""
  manifest = reader.LoadManifest(data_dir)
  langs = language_codes.CheckIn(languages, list(manifest['languages']), 'languages',
                                 f'the corpus at {data_dir}') or list(manifest['languages'])
  out = TestSet(split, {})
  for lang in langs:
    if not manifest['languages'][lang][split]:
      out.skipped['languages without sentences'] = out.skipped.get('languages without sentences', 0) + 1
      log(f'{lang}: no {split} sentences, skipped')
      continue
    out.pairs[lang] = _Take(reader.Pairs(data_dir, lang, split), max_sentences)
  return out


def ReadTsv(path: str) -> List[Tuple[str, str]]:
  """(source, reference) pairs of one file; DataError naming file and line on a bad line."""
  raw = files.ReadBytes(path)
  if raw.startswith(b'\xef\xbb\xbf'):
    raw = raw[3:]  # a UTF-8 byte-order mark is not part of the first source
  pairs = []
  for lineno, line in enumerate(raw.split(b'\n'), 1):
    line = line.rstrip(b'\r')
    if not line.strip():
      continue
    try:
      text = line.decode('utf-8')
    except UnicodeDecodeError as e:
      raise report_lib.DataError(f'{path}:{lineno}: not UTF-8 (byte {e.start + 1} of the line)') from None
    cols = text.split('\t')
    if len(cols) != 2:
      raise report_lib.DataError(f'{path}:{lineno}: expected 2 tab-separated columns (source, reference), '
                                 f'got {len(cols)}')
    if not cols[0].strip() or not cols[1].strip():
      raise report_lib.DataError(f'{path}:{lineno}: empty {"source" if not cols[0].strip() else "reference"}')
    pairs.append((cols[0], cols[1]))
  return pairs


def FromTsvDir(directory: str, known_languages: Sequence[str], max_sentences: int = 0,
               languages: Optional[Sequence[str]] = None) -> TestSet:
  """Every `<lang>.tsv` in `directory` (or those of `languages`); languages outside `known_languages` are
  an error, since the model has no tag for them."""
  if not files.IsDir(directory):
    raise report_lib.DataError(f'--test_dir {directory}: not a directory')
  names = sorted(f for f in files.ListDir(directory) if f.endswith('.tsv'))
  if not names:
    raise report_lib.DataError(f'--test_dir {directory}: no <lang>.tsv files')
  known = set(known_languages)
  out = TestSet(f'tsv-{os.path.basename(os.path.normpath(directory))}', {})
  for name in names:
    lang = name[:-len('.tsv')]
    if languages and lang not in languages:
      continue
    path = os.path.join(directory, name)
    language_codes.CheckIn([lang], sorted(known), path, 'the languages the model was trained on')
    pairs = ReadTsv(path)
    if not pairs:
      out.skipped['empty files'] = out.skipped.get('empty files', 0) + 1
      continue
    out.pairs[lang] = _Take(pairs, max_sentences)
  if languages:
    missing = [l for l in languages if l not in out.pairs and not files.Exists(os.path.join(directory, f'{l}.tsv'))]
    if missing:
      raise report_lib.DataError(f'--test_dir {directory}: no {missing[0]}.tsv')
  return out
