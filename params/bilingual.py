"""Bilingual baselines: one dense Transformer per language pair X -> English, from one template.

The paper reports multilingual models as BLEU deltas against a bilingual model per pair. Here every pair of
the default corpus gets a registered experiment `Bilingual_<code>` (e.g. `Bilingual_de`, `Bilingual_sr-Latn`
is `Bilingual_sr_Latn`), generated from `BilingualBase`: the tiny dense model trained on that pair alone,
with the multilingual models' vocabularies so BLEU compares like with like.
"""
from lingvo_gshard.core import registry
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
