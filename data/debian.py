"""Optional extra catalogs from Debian packages, fetched with `apt-get download` (never installed).

Debian ships translations inside each program's package, so a pinned list of architecture-independent
`-data`/`-common` packages of large translated programs grows the corpus reproducibly: the same names give
the same catalogs for a Debian release, and the manifest records every .deb's checksum. Off by default and in
tests (it needs the Debian archive and `apt-get update`); a .deb already in the cache is not fetched again.

A .deb is an `ar` archive whose `data.tar.*` member holds the files; it is read here in memory with the
standard library (gzip, xz, bzip2 or uncompressed), and through `dpkg-deb --fsys-tarfile` for any other
compression (zstd).
"""
import glob
import io
import os
import subprocess
import tarfile

from lingvo_gshard.data import report as report_lib

# Packages with many translated UI strings in many languages (Debian 12 "bookworm" names).
L10N_PACKAGES = (
    'libgtk-3-common',
    'libgtk-4-common',
    'gnome-control-center-data',
    'gnome-shell-common',
    'nautilus-data',
    'evolution-data-server-common',
    'evolution-common',
    'gedit-common',
    'evince-common',
    'gnome-software-common',
    'libgweather-4-common',
    'gimp-data',
    'inkscape',
    'xfce4-panel',
    'mate-desktop-common',
    'xkb-data',
    'vim-common',
)


class DebError(ValueError):
  """A file is not a readable Debian package."""


def FetchDebs(packages, cache_dir):
  """Downloads packages with `apt-get download` into cache_dir, skipping those already there.

  Args:
    packages: names, optionally pinned to a version as `name=version`.
    cache_dir: directory for the .deb files (created if missing).

  Returns:
    Sorted paths of the .deb files of all requested packages.

  Raises:
    report_lib.DataError: apt-get is missing or fails (message names the packages and apt's own line).
  """
  os.makedirs(cache_dir, exist_ok=True)

  def _Have(spec):
    name, _, version = spec.partition('=')
    pattern = f'{name}_{version.replace(":", "%3a") if version else "*"}_*.deb'
    return sorted(glob.glob(os.path.join(cache_dir, pattern)))

  missing = [p for p in packages if not _Have(p)]
  if missing:
    try:
      result = subprocess.run(['apt-get', 'download', '-q'] + missing, cwd=cache_dir, capture_output=True,
                              text=True, check=False)
    except OSError as e:
      raise report_lib.DataError(f'apt-get download: cannot run apt-get: {e.strerror or e}') from None
    if result.returncode != 0:
      errors = [l for l in result.stderr.splitlines() if l.startswith('E:')] or result.stderr.splitlines()
      raise report_lib.DataError(f'apt-get download {" ".join(missing)}: '
                                 f'{errors[0] if errors else "exit " + str(result.returncode)} '
                                 f'(run apt-get update first?)')
  paths = []
  for p in packages:
    have = _Have(p)
    if not have:
      raise report_lib.DataError(f'apt-get download {p}: no .deb appeared in {cache_dir}')
    paths.append(have[-1])
  return sorted(paths)


def _ArMembers(data, path):
  if not data.startswith(b'!<arch>\n'):
    raise DebError(f'{path}: not a Debian package (no ar archive header)')
  offset = 8
  while offset + 60 <= len(data):
    header = data[offset:offset + 60]
    name = header[:16].decode('ascii', errors='replace').strip().rstrip('/')
    try:
      size = int(header[48:58].decode('ascii').strip())
    except ValueError:
      raise DebError(f'{path}: corrupt ar member header at byte {offset}') from None
    start = offset + 60
    if start + size > len(data):
      raise DebError(f'{path}: truncated ar member {name!r}')
    yield name, data[start:start + size]
    offset = start + size + (size & 1)


def _DataTar(path):
  with open(path, 'rb') as f:
    data = f.read()
  for name, member in _ArMembers(data, path):
    if name.startswith('data.tar'):
      suffix = name[len('data.tar'):]
      if suffix in ('', '.gz', '.xz', '.bz2'):
        return tarfile.open(fileobj=io.BytesIO(member), mode='r:*')
      try:
        tar_bytes = subprocess.run(['dpkg-deb', '--fsys-tarfile', path], capture_output=True,
                                   check=True).stdout
      except (OSError, subprocess.CalledProcessError) as e:
        raise DebError(f'{path}: cannot unpack {name} (needs dpkg-deb): {e}') from None
      return tarfile.open(fileobj=io.BytesIO(tar_bytes), mode='r:')
  raise DebError(f'{path}: no data.tar member')


def MoMembers(path):
  """Returns [(member path, bytes)] of every .mo file in a .deb, sorted by member path.

  Raises:
    DebError: the file is not a readable .deb (message names it).
  """
  if not os.path.isfile(path):
    raise DebError(f'{path}: no such file')
  try:
    with _DataTar(path) as tar:
      out = []
      for info in tar:
        if info.isfile() and info.name.endswith('.mo'):
          out.append((info.name.lstrip('./'), tar.extractfile(info).read()))
  except (OSError, tarfile.TarError, EOFError) as e:
    raise DebError(f'{path}: corrupt package data: {e}') from None
  return sorted(out)
