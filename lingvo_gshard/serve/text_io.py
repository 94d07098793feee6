"""Translating a stream of text lines: reading them (UTF-8, by line), translating them in buffers, writing
text or JSON lines in input order, and counting what was empty, cut or not UTF-8 (gshard_translate's core)."""
import dataclasses
import json
import os
import time
from typing import Callable, Iterator, List, Tuple

from lingvo_gshard.utils import files


@dataclasses.dataclass
class Options:
  """How lines are read, translated and written (gshard_translate's flags of the same names)."""
  nbest: int = 1
  format: str = 'text'  # 'text' or 'jsonl'
  errors: str = 'strict'  # bad UTF-8: 'strict' (an error naming the line) or 'replace' (U+FFFD, counted)
  source_language: str = ''
  target_language: str = ''  # '' = the model's default (English)
  buffer_size: int = 10000


@dataclasses.dataclass
class Counts:
  lines: int = 0
  empty: int = 0
  truncated: int = 0
  replaced: int = 0
  decode_seconds: float = 0.0

  def Summary(self, name: str, startup: float) -> str:
    rate = (self.lines - self.empty) / max(self.decode_seconds, 1e-9)
    extra = [f'{self.empty} empty'] if self.empty else []
    if self.truncated:
      extra.append(f'{self.truncated} cut to the model\'s longest source')
    if self.replaced:
      extra.append(f'{self.replaced} with bytes that are not UTF-8 replaced')
    return (f'translated {self.lines} lines of {name}{" (" + ", ".join(extra) + ")" if extra else ""} in '
            f'{self.decode_seconds:.1f}s: {rate:.1f} sentences/s (start-up {startup:.1f}s)')


def Lines(stream, name: str, errors: str = 'strict') -> Iterator[Tuple[int, str, bool]]:
  """(line number, text, bytes replaced) of each line of a binary stream; bad UTF-8 under 'strict' is a
  ValueError naming the line."""
  for number, raw in enumerate(stream, 1):
    raw = raw.rstrip(b'\n').rstrip(b'\r')
    try:
      yield number, raw.decode('utf-8'), False
    except UnicodeDecodeError as e:
      if errors == 'strict':
        raise ValueError(f'{name}:{number}: not UTF-8 (byte {e.start + 1} of the line); --errors=replace '
                         'translates it with U+FFFD for the bad bytes') from None
      yield number, raw.decode('utf-8', errors='replace'), True


def Format(number: int, source: str, nbest: List[Tuple[str, float]], truncated: bool, options: Options) -> str:
  """The output of one input line: see tools/translate.py for the formats."""
  best, score = nbest[0] if nbest else ('', 0.0)
  if options.format == 'jsonl':
    row = {'line': number, 'source': source, 'translation': best, 'score': round(score, 4), 'truncated': truncated}
    if options.source_language:
      row['source_language'] = options.source_language
    if options.target_language:
      row['target_language'] = options.target_language
    if options.nbest > 1:
      row['nbest'] = [{'translation': h, 'score': round(s, 4)} for h, s in nbest]
    return json.dumps(row, ensure_ascii=False) + '\n'
  if options.nbest > 1:
    return ''.join(f'{number}\t{rank}\t{s:.4f}\t{h}\n' for rank, (h, s) in enumerate(nbest, 1))
  return best + '\n'


def _TranslateBuffer(translator, rows, out, counts: Counts, options: Options, progress):
  """Translates the non-empty lines of `rows` [(number, text, replaced)] together, writes all in order."""
  todo = [i for i, (_, text, _) in enumerate(rows) if text.strip()]
  start = time.time()
  texts = [rows[i][1] for i in todo]
  nbest, truncated = (translator.TranslateNbest(texts, options.nbest, progress,
                                                target_language=options.target_language or None)
                      if todo else ([], []))
  counts.decode_seconds += time.time() - start
  results = {i: (n, c) for i, n, c in zip(todo, nbest, truncated)}
  for i, (number, text, replaced) in enumerate(rows):
    n, cut = results.get(i, ([], False))
    out.write(Format(number, text, n, cut, options))
    counts.lines += 1
    counts.empty += i not in results
    counts.truncated += cut
    counts.replaced += replaced
  out.flush()


def TranslateStream(translator, stream, name: str, out, options: Options, interactive: bool = False,
                    log: Callable[[str], None] = lambda line: None) -> Counts:
  """Translates every line of the binary `stream` into the text stream `out`, `options.buffer_size` lines at a
  time (1 when `interactive`: each line as it is typed), logging progress every 5 s."""
  counts, rows = Counts(), []
  state = {'before': 0, 'began': time.time(), 'last': time.time()}

  def Progress(done, total):
    now = time.time()
    if not interactive and total > 1 and (now - state['last'] >= 5 or done == total):
      state['last'] = now
      rate = (state['before'] + done) / max(counts.decode_seconds + now - state['began'], 1e-9)
      log(f'  {state["before"] + done} sentences, {rate:.1f}/s')

  def Flush():
    state['began'] = time.time()
    _TranslateBuffer(translator, rows, out, counts, options, Progress)
    state['before'] = counts.lines - counts.empty

  buffer = 1 if interactive else options.buffer_size
  for row in Lines(stream, name, options.errors):
    rows.append(row)
    if len(rows) >= buffer:
      Flush()
      rows = []
  if rows:
    Flush()
  return counts


def TranslateInto(translator, stream, name: str, output_path: str, options: Options, interactive: bool = False,
                  log: Callable[[str], None] = lambda line: None) -> Counts:
  """TranslateStream into the file `output_path` (local or a URL). The output is written beside it and moved
  over it at the end, so an error leaves an earlier output whole and no partial file behind."""
  partial = f'{output_path}.partial-{os.getpid()}'
  try:
    with files.Open(partial, 'w') as out:
      counts = TranslateStream(translator, stream, name, out, options, interactive, log)
    files.Rename(partial, output_path)
    return counts
  finally:
    if files.Exists(partial):
      files.Remove(partial)
