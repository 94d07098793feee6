"""The multilingual X->English corpus (installed as lingvo_gshard.data).

One concept per module, in pipeline order:
  mo_reader.py   GNU .mo catalogs -> entries (both byte orders, declared charsets).
  cleaning.py    entries / raw pairs -> clean sentence pairs, with counted skip reasons.
  languages.py   gettext locale -> BCP-47 tag; English detection; high/medium/low buckets.
  debian.py      optional catalogs from pinned Debian packages (`apt-get download`).
  sources.py     inputs: gettext catalogs, TSV files, TFDS translation datasets -> Units of pairs.
  corpus.py      merge, deduplicate, keep the N largest languages, leak-free English-hash splits.
  gettext_m4.py  the TFDS builder `gettext_m4` ({lang, source, target}; train/dev/test).
  build.py       atomic, idempotent build into a data dir, with manifest.json.
  reader.py      what the input pipeline reads: LoadManifest, Languages, LoadSplit, Pairs.
  report.py      the build report and DataError (one-line fatal errors).
The binary is tools/prepare_data.py.
"""
