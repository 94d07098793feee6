"""Bilingual baselines: one dense Transformer per language pair X -> English, from one template.

The paper reports multilingual models as BLEU deltas against a bilingual model per pair. Here every pair of
the default corpus gets a registered experiment `Bilingual_<code>` (e.g. `Bilingual_de`, `Bilingual_sr-Latn`
is `Bilingual_sr_Latn`), and any other language code (of a corpus of your own) one made on first use, all
generated from `BilingualBase`: the tiny dense model trained on that pair alone,
with the multilingual models' vocabularies so BLEU compares like with like. As registered it has
M4TinyDense's size; `Overrides(train_pairs)` sizes it for its pair's data and sets its step budget (what
tools/train_baselines.py trains; the rule is TIERS and Steps below).
"""
from lingvo_gshard.core import registry
from lingvo_gshard.data import language_codes
from lingvo_gshard.data import report
from lingvo_gshard.params import m4_tiny

# The 100 languages the default corpus keeps on a Debian 12 image (prepare_data's manifest), from high to low
# resource. A language missing from the corpus a run points at fails with a one-line error naming it.
M4_LANGUAGES = (
    'fr', 'uk', 'sv', 'es', 'ru', 'de', 'zh-CN', 'it', 'ja', 'pl', 'tr', 'ko', 'pt', 'id', 'sr', 'vi',
    'zh-TW', 'ca', 'cs', 'bg', 'fi', 'da', 'pt-BR', 'nl', 'ro', 'hu', 'ka', 'el', 'hr', 'nb', 'sk', 'eo',
    'sl', 'gl', 'pa', 'mr', 'lt', 'ta', 'kn', 'eu', 'et', 'be', 'sr-Latn', 'or', 'oc', 'th', 'ga', 'lv',
    'ar', 'bn', 'ast', 'gu', 'zh-HK', 'he', 'hi', 'as', 'te', 'sq', 'ms', 'ca-valencia', 'fur', 'ml', 'nn',
    'bn-IN', 'ne', 'af', 'crh', 'cy', 'dz', 'bs', 'be-Latn', 'kk', 'mai', 'ug', 'my', 'is', 'fa', 'ia',
    'mk', 'az', 'mn', 'sc', 'wa', 'si', 'xh', 'km', 'hy', 'fil', 'sr-ijekavsk', 'ps', 'nso', 'br', 'ky',
    'nds', 'ku', 'tt', 'an', 'yi', 'rw', 'lg',
)


# Baselines sized for their data (the paper tuned each pair's model; fairseq's low-resource recipes shrink
# the model and raise dropout as the data shrinks): (fewest training pairs, tier, sizes). A pair takes the
# first tier whose floor it reaches. 'large' is M4TinyDense itself.
TIERS = (
    (30000, 'large', dict(model_dim=256, hidden_dim=1024, num_heads=4, num_layers=3, dropout=0.1, rows=0)),
    (8000, 'medium', dict(model_dim=256, hidden_dim=1024, num_heads=4, num_layers=2, dropout=0.2, rows=16)),
    (0, 'small', dict(model_dim=128, hidden_dim=512, num_heads=2, num_layers=2, dropout=0.3, rows=16)),
)
# Training budget: steps proportional to the pair's training data, between a floor and a cap; dev loss is
# evaluated (and a checkpoint written) EVALS_PER_RUN times a run and early stopping ends a run whose dev loss
# has stopped falling. The floor is what the smallest pairs need (a small pair's baseline still gained from a
# schedule longer than the steps it ended up using: docs/experiments/m4_tiny/reproduce.md); the cap is what the
# CPU allows.
STEPS_PER_PAIR = 0.6
MIN_STEPS, MAX_STEPS = 1500, 2000
EVALS_PER_RUN = 10
PATIENCE = 2


def Tier(train_pairs: int):
  """(tier name, sizes) of a pair with `train_pairs` training pairs."""
  for floor, name, sizes in TIERS:
    if train_pairs >= floor:
      return name, sizes
  raise ValueError(f'train_pairs must be >= 0, got {train_pairs}')


def Steps(train_pairs: int) -> int:
  """The step budget of a pair: STEPS_PER_PAIR per training pair, within [MIN_STEPS, MAX_STEPS]."""
  return int(min(MAX_STEPS, max(MIN_STEPS, round(STEPS_PER_PAIR * train_pairs))))


def Overrides(train_pairs: int) -> str:
  """Params overrides (params.txt keys) that size `Bilingual_<code>` for a pair of `train_pairs` and set its
  budget and early stopping; the trainer records them in params.txt, so the evaluator rebuilds the same."""
  _, z = Tier(train_pairs)
  steps = Steps(train_pairs)
  interval = max(50, steps // EVALS_PER_RUN)
  items = [('task.model_dim', z['model_dim']), ('task.hidden_dim', z['hidden_dim']),
           ('task.num_heads', z['num_heads']), ('task.encoder.num_layers', z['num_layers']),
           ('task.decoder.num_layers', z['num_layers']), ('task.input_dropout_prob', z['dropout']),
           ('task.encoder.layer_tpl.residual_dropout_prob', z['dropout']),
           ('task.decoder.layer_tpl.residual_dropout_prob', z['dropout']),
           ('learner.max_steps', steps), ('learner.eval_interval', interval),
           ('learner.save_interval', interval), ('learner.keep_checkpoints', PATIENCE + 3),
           ('learner.keep_checkpoint_every_n_hours', 0.0),
           ('learner.early_stop_patience', PATIENCE)]
  if z['rows']:
    items.append(('input.train.batch_rows', z['rows']))
  return '; '.join(f'{k} : {v}' for k, v in items)


class BilingualBase(m4_tiny.M4TinyBase):
  """Template: the tiny dense model on one pair (not registered)."""
  LANGUAGE = ''

  def _Input(self, split, repeat):
    p = super()._Input(split, repeat)
    p.languages = [self.LANGUAGE]
    # The vocabulary is the multilingual one (trained on all languages), shared by every baseline.
    p.vocab.languages = []
    return p


def ExperimentName(code: str) -> str:
  return 'Bilingual_' + code.replace('-', '_')


def _Register(code):
  cls = type(ExperimentName(code), (BilingualBase,), {
      'LANGUAGE': code, '__module__': __name__,
      '__doc__': f'Bilingual baseline {code} -> en: the tiny dense model on this pair alone.'})
  globals()[cls.__name__] = cls
  return registry.Register(cls)


for _code in M4_LANGUAGES:
  _Register(_code)


def _AnyLanguage(suffix: str):
  """Bilingual_<code> for a language outside M4_LANGUAGES (a corpus of your own: prepare_data --tsv): made
  on first use, as the registered ones are. The code is a registered tag as the corpus spells it (`fr`,
  not `fre`); a language without one was declared to prepare_data and is named by its registered class."""
  try:
    code = language_codes.CheckNew(suffix.replace('_', '-'), f'Bilingual_{suffix}')
  except report.DataError as e:
    raise registry.RegistryError(str(e).split('; to add a language')[0]) from None
  if code.replace('-', '_') != suffix:  # another spelling of a tag (zh_Hant is zh-TW): the experiment of the tag
    return registry.GetClass(ExperimentName(code))
  return _Register(code)


registry.RegisterFamily('Bilingual_', _AnyLanguage)
