"""Data integrity: the manifest records every built file's size and sha256; opening a data directory checks
the sizes, `prepare_data --verify` the checksums, and a corrupt record met while training stops the run in one
line naming the shard."""
import hashlib
import json
import os
import shutil
import subprocess
import sys

import pytest

from lingvo_gshard.core import sharding
from lingvo_gshard.data import build
from lingvo_gshard.data import integrity
from lingvo_gshard.data import reader
from lingvo_gshard.data import report
from lingvo_gshard.train import trainer as trainer_lib
import input_helpers
import trainer_test


@pytest.fixture(scope='module')
def built(tmp_path_factory):
  return input_helpers.BuildCorpus(str(tmp_path_factory.mktemp('corpus')))


def _Copy(built, tmp_path):
  data_dir = str(tmp_path / 'data')
  shutil.copytree(built, data_dir)
  return data_dir, reader.LoadManifest(data_dir)


def _TrainShard(manifest):
  return max((rel for rel in manifest[integrity.FILES] if '-train.' in rel),
             key=lambda rel: manifest[integrity.FILES][rel]['bytes'])


def _Verify(data_dir):
  return subprocess.run([sys.executable, '-m', 'lingvo_gshard.tools.prepare_data', f'--data_dir={data_dir}',
                         '--verify'], capture_output=True, text=True, timeout=300)


def test_manifest_records_every_built_file_as_written(built):
  manifest = reader.LoadManifest(built)
  files = manifest[integrity.FILES]
  on_disk = sorted(os.path.relpath(os.path.join(base, f), built)
                   for base, _, names in os.walk(os.path.join(built, 'gettext_m4')) for f in names)
  assert sorted(files) == on_disk and any('-train.' in rel for rel in files)
  for rel, info in files.items():
    with open(os.path.join(built, rel), 'rb') as f:
      data = f.read()
    assert info == {'bytes': len(data), 'sha256': hashlib.sha256(data).hexdigest()}, rel
  out = _Verify(built)
  assert out.returncode == 0 and out.stdout.strip().endswith('as built: OK'), out.stderr[-2000:]


def test_a_shard_cut_short_is_refused_on_open_naming_it(built, tmp_path):
  data_dir, manifest = _Copy(built, tmp_path)
  shard = os.path.join(data_dir, _TrainShard(manifest))
  size = os.path.getsize(shard)
  with open(shard, 'r+b') as f:
    f.truncate(size // 2)
  with pytest.raises(report.DataError) as e:
    reader.LoadManifest(data_dir)
  assert str(e.value).startswith(f'{shard}: {size // 2} bytes, the build wrote {size} (cut short or changed)')
  assert '\n' not in str(e.value)
  os.remove(shard)
  with pytest.raises(report.DataError, match=f'^{shard}: missing'):
    reader.LoadManifest(data_dir)


def test_bytes_changed_in_place_are_found_by_verify_and_stop_training_in_one_line(built, tmp_path):
  data_dir, manifest = _Copy(built, tmp_path)
  shard = os.path.join(data_dir, _TrainShard(manifest))
  with open(shard, 'r+b') as f:  # same size: only the checksums can tell
    f.seek(os.path.getsize(shard) // 2)
    f.write(b'\xff' * 64)
  out = _Verify(data_dir)
  assert out.returncode == 1, out.stderr[-2000:]
  assert [l for l in out.stderr.splitlines() if l.startswith('prepare_data:')] == [
      f"prepare_data: {shard}: sha256 differs from the build's (changed in place)"]
  assert f'{len(manifest[integrity.FILES]) - 1} of {len(manifest[integrity.FILES])} files' in out.stdout
  # Training reads that shard (for the vocabulary, then the batches): the run stops in one line, and writes
  # no checkpoint.
  logdir = tmp_path / 'run'
  trainer = trainer_lib.Trainer(trainer_test._SmallMoE(data_dir), sharding.Partitioner('none'), str(logdir),  # pylint: disable=protected-access
                                log=lambda line: None)
  with pytest.raises(report.DataError) as e:
    trainer.Train()
  message = str(e.value)
  assert '\n' not in message and message.startswith(f'{data_dir}: a corrupt record (')
  assert f') in {shard}; ' in message and message.endswith('the last checkpoint is step 0')
  assert not [f for f in os.listdir(logdir) if f.startswith('ckpt-')]


def test_verify_without_recorded_checksums_says_so(built, tmp_path):
  data_dir, manifest = _Copy(built, tmp_path)
  del manifest[integrity.FILES]
  with open(os.path.join(data_dir, build.MANIFEST), 'w', encoding='utf-8') as f:
    json.dump(manifest, f)
  reader.LoadManifest(data_dir)  # an older build opens unchecked
  out = _Verify(data_dir)
  assert out.returncode == 1 and 'records no file checksums' in out.stderr
