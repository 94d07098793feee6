"""A map of the experts: for a trained MoE, the fraction of each language's tokens whose first choice is each
expert, per MoE layer (encoder and decoder), from a dev pass; and per layer how language-specific routing is.

How language-specific: the mutual information I(language; expert) between a token's language and its first
expert, with p(language, expert) the token counts of the dev pass over all of them (so a language weighs by its
dev tokens), in bits; and the same divided by H(expert), the share of the routing's uncertainty the language
explains: 0 when every language routes alike, 1 when the language decides the expert.

The map (`Build`) is JSON: {"languages": [...largest first], "buckets": {lang: bucket}, "layers": {"encoder/
layers_1": {"experts": E, "mutual_information_bits", "normalized_mutual_information", "expert_order": [...],
"tokens": {lang: n}, "fractions": {lang: [E fractions summing to 1]}}}}. `Plot` draws it: a heatmap per
layer, languages from the largest down, experts ordered so that experts with similar language profiles sit
together (average-linkage clustering of their columns).
"""
from typing import Callable, Dict, Sequence

import numpy as np

_SUFFIX = '/expert_tokens'


def Collect(learner, batches_by_language: Dict[str, Sequence[Dict[str, np.ndarray]]]
            ) -> Dict[str, Dict[str, np.ndarray]]:
  """{layer ('encoder/layers_1'): {language: [E] first-choice token counts}} over each language's batches,
  routed as at evaluation (`learner.RoutingStep`)."""
  counts: Dict[str, Dict[str, np.ndarray]] = {}
  for lang, batches in batches_by_language.items():
    for batch in batches:
      for key, value in learner.RoutingStep(batch).items():
        layer = key[len('moe/'):-len(_SUFFIX)]
        per_lang = counts.setdefault(layer, {})
        per_lang[lang] = per_lang.get(lang, 0) + np.asarray(value, np.float64)
  return counts


def MutualInformation(counts: Dict[str, np.ndarray]):
  """(I(language; expert) in bits, I / H(expert)) from {language: [E] token counts}."""
  joint = np.stack([np.asarray(c, np.float64) for c in counts.values()])
  total = joint.sum()
  if total <= 0:
    return 0.0, 0.0
  joint /= total
  p_lang, p_expert = joint.sum(1, keepdims=True), joint.sum(0, keepdims=True)
  nonzero = joint > 0
  mi = float(np.sum(joint[nonzero] * np.log2(joint[nonzero] / (p_lang @ p_expert)[nonzero])))
  h_expert = float(-np.sum(p_expert[p_expert > 0] * np.log2(p_expert[p_expert > 0])))
  return max(mi, 0.0), (max(mi, 0.0) / h_expert if h_expert > 0 else 0.0)


def ExpertOrder(fractions: np.ndarray) -> list:
  """Experts (columns of a [languages, E] matrix) ordered by average-linkage clustering of their profiles."""
  num_experts = fractions.shape[1]
  if num_experts < 3:
    return list(range(num_experts))
  from scipy.cluster import hierarchy  # pylint: disable=g-import-not-at-top
  columns = fractions.T + 1e-12  # an expert no language uses still has a defined (flat) profile
  return [int(i) for i in hierarchy.leaves_list(hierarchy.linkage(columns, method='average', metric='euclidean'))]


def Build(counts: Dict[str, Dict[str, np.ndarray]], sizes: Dict[str, int], buckets: Dict[str, str]) -> Dict:
  """The map (module docstring) from Collect's counts; languages ordered by `sizes` (training pairs),
  largest first."""
  languages = sorted({lang for per_lang in counts.values() for lang in per_lang},
                     key=lambda lang: (-sizes.get(lang, 0), lang))
  layers = {}
  for layer in sorted(counts, key=lambda name: (not name.startswith('encoder'), name)):
    per_lang = {lang: counts[layer][lang] for lang in languages if lang in counts[layer]}
    fractions = {lang: c / max(c.sum(), 1.0) for lang, c in per_lang.items()}
    mi, normalized = MutualInformation(per_lang)
    matrix = np.stack([fractions[lang] for lang in fractions])
    layers[layer] = {
        'experts': int(matrix.shape[1]),
        'mutual_information_bits': round(mi, 5),
        'normalized_mutual_information': round(normalized, 5),
        'expert_order': ExpertOrder(matrix),
        'tokens': {lang: int(c.sum()) for lang, c in per_lang.items()},
        'fractions': {lang: [round(float(v), 6) for v in f] for lang, f in fractions.items()},
    }
  return {'languages': languages, 'buckets': {lang: buckets.get(lang, '') for lang in languages},
          'layers': layers}


def Plot(expert_map: Dict, path: str, title: str = '', log: Callable[[str], None] = lambda line: None):
  """Heatmaps of `expert_map` (Build's), one per layer, written as a PNG to `path` (local or a URL)."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top
  from lingvo_gshard.utils import files  # pylint: disable=g-import-not-at-top
  layers = expert_map['layers']
  languages = expert_map['languages']
  fig, axes = plt.subplots(1, len(layers), figsize=(2.2 + 0.3 * sum(l['experts'] for l in layers.values()),
                                                    1.5 + 0.12 * len(languages)), squeeze=False)
  for ax, (name, layer) in zip(axes[0], layers.items()):
    order = layer['expert_order']
    rows = [lang for lang in languages if lang in layer['fractions']]
    matrix = np.array([[layer['fractions'][lang][e] for e in order] for lang in rows])
    image = ax.imshow(matrix, aspect='auto', cmap='viridis', vmin=0.0, vmax=max(float(matrix.max()), 1e-9))
    ax.set_title(f'{name}\nI = {layer["mutual_information_bits"]:.2f} bits '
                 f'({100 * layer["normalized_mutual_information"]:.0f}% of H)', fontsize=8)
    ax.set_xticks(range(len(order)))
    ax.set_xticklabels([str(e) for e in order], fontsize=6)
    ax.set_xlabel('expert (clustered)', fontsize=7)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f'{lang} ({expert_map["buckets"].get(lang, "")[:1]})' for lang in rows], fontsize=5)
    fig.colorbar(image, ax=ax, fraction=0.04)
  axes[0][0].set_ylabel('language (largest first; h/m/l bucket)', fontsize=7)
  if title:
    fig.suptitle(title, fontsize=9)
  fig.tight_layout()
  files.SaveFigure(fig, path, dpi=110)
  plt.close(fig)
  log(f'wrote {path}')
