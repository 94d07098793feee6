"""Bilingual baselines: one model per language pair, trained, its best checkpoint decoded, the score recorded.

    plans = bilingual_baselines.Plan(manifest, ['de', 'lg'])   # sizes and step budgets (params/bilingual)
    runner = bilingual_baselines.BaselineRunner('/tmp/bilingual', '/tmp/gshard_data',
                                                'docs/experiments/m4_tiny/runs/bilingual')
    summary = runner.Run(plans)                                  # {'finished', 'skipped', 'failed'}

Each pair trains `Bilingual_<code>` in ROOT/<code> with the overrides of its tier and budget (early stopping
on dev cross-entropy), then the kept checkpoint with the lowest dev cross-entropy decodes the pair's test
split, and the scores go to RUNS_DIR/<code>.json (written whole or not at all). A pair whose file exists is
skipped; a killed pair resumes from its checkpoints; a pair that fails is reported and the others go on.
"""
import dataclasses
import json
import os
import time
from typing import Callable, Dict, List, Optional, Sequence

import tensorflow as tf

from lingvo_gshard import params as params_lib
from lingvo_gshard.core import experiment as experiment_lib
from lingvo_gshard.core import registry
from lingvo_gshard.core import sharding
from lingvo_gshard.data import language_codes
from lingvo_gshard.data import reader
from lingvo_gshard.eval import decode_job
from lingvo_gshard.params import bilingual
from lingvo_gshard.runtime import step_runner
from lingvo_gshard.train import checkpoints
from lingvo_gshard.train import dev_metrics
from lingvo_gshard.train import trainer as trainer_lib
from lingvo_gshard.utils import files
from lingvo_gshard.utils import provenance


@dataclasses.dataclass
class PairPlan:
  """What one baseline is: the pair, its data, its experiment and how it is sized and trained."""
  lang: str
  train: int
  test: int
  bucket: str
  experiment: str
  tier: str
  steps: int
  overrides: str


def Plan(manifest: Dict, languages: Sequence[str] = ()) -> List[PairPlan]:
  """Plans of `languages` (default: every corpus language), largest training data first."""
  info = manifest['languages']
  languages = language_codes.CheckIn(languages, list(info), 'languages', 'the corpus')
  langs = sorted(set(languages) or info, key=lambda l: (-info[l]['train'], l))
  plans = []
  for l in langs:
    n = info[l]['train']
    plans.append(PairPlan(lang=l, train=n, test=info[l].get('test', 0), bucket=info[l].get('bucket', ''),
                          experiment=bilingual.ExperimentName(l), tier=bilingual.Tier(n)[0],
                          steps=bilingual.Steps(n), overrides=bilingual.Overrides(n)))
  return plans




def BestCheckpoint(logdir: str) -> Optional[Dict]:
  """The training loop's dev evaluation with the lowest cross-entropy whose checkpoint is still there
  (early stopping keeps it), or None when there is none."""
  rows = [r for r in dev_metrics.ReadDevLog(logdir, 'trainer')
          if files.Exists(os.path.join(logdir, r['checkpoint'] + '.index'))]
  return dev_metrics.Best(rows)


def _Registered(plan: PairPlan) -> experiment_lib.Experiment:
  params_lib.LoadAll()
  return registry.Get(plan.experiment)


class BaselineRunner:
  """Trains, decodes and records the baselines of a list of PairPlans, one after the other."""

  def __init__(self, root: str, data_dir: str, runs_dir: str, max_sentences: int = 0, beam_size: int = 4,
               extra_overrides: str = '',
               make_experiment: Callable[[PairPlan], experiment_lib.Experiment] = _Registered,
               log: Callable[[str], None] = print):
    """`root`: the runs' log directories (ROOT/<code>); `runs_dir`: the results (RUNS_DIR/<code>.json);
    `extra_overrides` apply after each plan's; `max_sentences` > 0 scores only the first N test sentences."""
    self.root, self.data_dir, self.runs_dir = root, data_dir, runs_dir
    self.max_sentences, self.beam_size, self.extra = max_sentences, beam_size, extra_overrides
    self.make_experiment, self.log = make_experiment, log
    self.commit = provenance.CodeCommit()

  def ResultPath(self, plan: PairPlan) -> str:
    return os.path.join(self.runs_dir, f'{plan.lang}.json')

  def Done(self, plan: PairPlan) -> bool:
    """Whether the pair has a result of this test set (a partial-sample result does not count for a full
    one, nor the other way round)."""
    try:
      return json.loads(files.ReadText(self.ResultPath(plan))).get('requested_max_sentences') == self.max_sentences
    except (OSError, ValueError):
      return False

  def RunPair(self, plan: PairPlan) -> Dict:
    """Trains (or resumes) the pair's baseline, decodes its best checkpoint, writes and returns the record."""
    logdir = os.path.join(self.root, plan.lang)
    exp = self.make_experiment(plan)
    overrides = '; '.join(o for o in (plan.overrides, self.extra) if o)
    partitioner = sharding.Partitioner('none')
    trainer = trainer_lib.Trainer(exp, partitioner, logdir, self.data_dir, overrides, log=self._Indented,
                                  runner=step_runner.StepRunner(partitioner))
    latest = tf.train.latest_checkpoint(logdir)
    before = checkpoints.Step(latest) if latest else 0
    trainer.Train(evaluate=True)
    stopped = trainer.EarlyStopped()
    del trainer
    trained = checkpoints.Step(tf.train.latest_checkpoint(logdir))  # also when a rerun had nothing to train
    best = BestCheckpoint(logdir)
    checkpoint = os.path.join(logdir, best['checkpoint']) if best else tf.train.latest_checkpoint(logdir)
    results, _, _, _ = decode_job.Decode(exp, logdir, self.data_dir, 'test', languages=[plan.lang],
                                         max_sentences=self.max_sentences, beam_size=self.beam_size,
                                         checkpoint=checkpoint, log=self._Indented)
    scores = results['languages'][plan.lang]
    seconds = checkpoints.TrainSeconds(logdir)
    record = {
        'lang': plan.lang, 'experiment': plan.experiment, 'bucket': plan.bucket, 'train': plan.train,
        'tier': plan.tier, 'steps_planned': plan.steps, 'steps_trained': trained,
        'early_stopped_at': stopped[0] if stopped else None, 'checkpoint_step': results['step'],
        'dev_xent': best['xent'] if best else None,
        'wall_clock_s': max(seconds.values()) if seconds else None,
        'checkpoint_wall_clock_s': seconds.get(os.path.basename(checkpoint)),
        'decode_seconds': results['decode_seconds'], 'set': 'test',
        'requested_max_sentences': self.max_sentences,  # 0 below: the whole test split was scored
        'max_sentences': 0 if scores['sentences'] == plan.test else self.max_sentences,
        'sentences': scores['sentences'], 'bleu': scores['bleu'], 'chrf': scores['chrf'],
        'bleu_signature': results['bleu_signature'], 'chrf_signature': results['chrf_signature'],
        'beam_size': self.beam_size, 'overrides': overrides, 'commit': self.commit,
        'steps_this_run': trained - before,
        # The corpus build it trained on: 1.0.0 stored training pairs in an order shared by every language.
        'data_version': reader.LoadManifest(self.data_dir)['version'],
    }
    files.WriteJson(self.ResultPath(plan), record)
    return record

  def _Indented(self, line: str):
    self.log('    ' + line)

  def Run(self, plans: Sequence[PairPlan]) -> Dict:
    """Every plan in order: skips those done, reports a failing one and goes on. Returns {'finished': [codes],
    'skipped': [codes], 'failed': {code: one-line error}}."""
    out = {'finished': [], 'skipped': [], 'failed': {}}
    todo = [p for p in plans if not self.Done(p)]
    out['skipped'] = [p.lang for p in plans if self.Done(p)]
    if out['skipped']:
      self.log(f'{len(out["skipped"])} of {len(plans)} pairs already have results in {self.runs_dir}: skipped')
    # The ETA weighs the steps left by each tier's seconds per step measured so far in this run.
    spent, steps_done = {}, {}
    start = time.time()
    for i, plan in enumerate(todo):
      self.log(f'[{i + 1}/{len(todo)}] {plan.lang}: {plan.train} pairs ({plan.bucket}), {plan.tier} model, '
               f'up to {plan.steps} steps{self._Eta(todo[i:], spent, steps_done)}')
      began = time.time()
      try:
        record = self.RunPair(plan)
      except trainer_lib.Preempted:
        raise  # SIGTERM/SIGINT end the whole job; the pair's checkpoint is saved
      except Exception as e:  # pylint: disable=broad-except
        message = (str(e).strip().splitlines() or [''])[0]
        out['failed'][plan.lang] = f'{type(e).__name__}: {message}'
        self.log(f'[{i + 1}/{len(todo)}] {plan.lang} FAILED: {out["failed"][plan.lang]}; going on')
        continue
      # Seconds per step trained in this process (decoding included): a resumed pair counts its own steps.
      spent[plan.tier] = spent.get(plan.tier, 0.0) + time.time() - began
      steps_done[plan.tier] = steps_done.get(plan.tier, 0) + max(record['steps_this_run'], 1)
      out['finished'].append(plan.lang)
      self.log(f'[{i + 1}/{len(todo)}] {plan.lang}: BLEU {record["bleu"]:.2f} chrF {record["chrf"]:.2f} '
               f'(ckpt-{record["checkpoint_step"]} of {record["steps_trained"]} steps'
               + (', stopped early' if record['early_stopped_at'] else '')
               + f'), {time.time() - began:.0f}s; wrote {self.ResultPath(plan)}')
    self.log(f'{len(out["finished"])} finished, {len(out["skipped"])} skipped, {len(out["failed"])} failed '
             f'in {time.time() - start:.0f}s' + ''.join(f'\n  {l}: {e}' for l, e in out['failed'].items()))
    return out

  @staticmethod
  def _Eta(left: Sequence[PairPlan], spent: Dict[str, float], steps_done: Dict[str, int]) -> str:
    if not spent:
      return ''
    overall = sum(spent.values()) / max(sum(steps_done.values()), 1)
    rate = lambda tier: spent[tier] / max(steps_done[tier], 1) if tier in spent else overall
    seconds = sum(p.steps * rate(p.tier) for p in left)
    return f'; ETA of the {len(left)} left {seconds / 3600:.1f} h (planned steps, per-tier rate so far)'
