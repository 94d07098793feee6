"""Installs lingvo_gshard.

The repository keeps `params/`, `data/` and `tools/` at the top level (the layout the project was asked for),
but installs them as `lingvo_gshard.params`, `lingvo_gshard.data` and `lingvo_gshard.tools`, so that no
generic top-level name such as `params` lands in site-packages.
"""
import os

import setuptools

# Top-level source folder -> installed package name.
_MAPPED = {
    'lingvo_gshard': 'lingvo_gshard',
    'params': 'lingvo_gshard.params',
    'data': 'lingvo_gshard.data',
    'tools': 'lingvo_gshard.tools',
}


def _packages():
  """Every package under the mapped folders, with the folder each one comes from."""
  packages, package_dir = [], {}
  for folder, name in _MAPPED.items():
    package_dir[name] = folder
    for sub in setuptools.find_packages(where=folder):
      packages.append(f'{name}.{sub}')
      package_dir[f'{name}.{sub}'] = os.path.join(folder, *sub.split('.'))
    packages.append(name)
  return packages, package_dir


_PACKAGES, _PACKAGE_DIR = _packages()

setuptools.setup(
    name='lingvo_gshard',
    version='0.1.0',
    description=('GShard: sparsely-gated Mixture-of-Experts Transformers for massively multilingual '
                 'translation, written on logical tensors and partitioned by sharding annotations.'),
    python_requires='>=3.10',
    packages=_PACKAGES,
    package_dir=_PACKAGE_DIR,
    install_requires=[
        'tensorflow>=2.21,<2.22',
        'tensorflow-text>=2.21,<2.22',
        'tensorflow-datasets>=4.9,<5',
        'sacrebleu>=2.4,<3',
        'absl-py>=2.1,<3',
        'sentencepiece>=0.2,<0.3',
        'tensorboard>=2.20,<2.22',  # summaries; TF 2.21 no longer pulls it in
        'numpy>=1.26,<3',
        'langcodes>=3.4,<4',  # language codes checked against the IANA registry, with the closest named
        'language_data>=1.2,<2',  # langcodes' names of languages ('French' -> fr)
    ],
    entry_points={
        'console_scripts': [
            'gshard_trainer = lingvo_gshard.tools.trainer:run',
            'gshard_evaluate = lingvo_gshard.tools.evaluate:run',
            'gshard_prepare_data = lingvo_gshard.tools.prepare_data:run',
            'gshard_list_models = lingvo_gshard.tools.list_models:run',
            'gshard_train_baselines = lingvo_gshard.tools.train_baselines:run',
            'gshard_m4_report = lingvo_gshard.tools.m4_report:run',
            'gshard_compare_runs = lingvo_gshard.tools.compare_runs:run',
            'gshard_translate = lingvo_gshard.tools.translate:run',
            'gshard_expert_map = lingvo_gshard.tools.expert_map:run',
            'gshard_router_logits = lingvo_gshard.tools.router_logits:run',
            'gshard_export = lingvo_gshard.tools.export:run',
            'gshard_average_checkpoints = lingvo_gshard.tools.average_checkpoints:run',
        ],
    },
    extras_require={
        # pytest-xdist: the README's test command runs two workers, one test file each at a time (tracing
        # and XLA compilation, most of the suite's time, run on one core per process).
        'test': ['pytest>=8,<10', 'pytest-xdist>=3.5,<4', 'hypothesis>=6.100,<7', 'matplotlib>=3.8,<4',
                 'torch==2.13.0', 'transformers>=4.40'],
        'plots': ['matplotlib>=3.8,<4'],
        # tools/decode_benchmark.py's reference (Hugging Face NLLB-MoE generate); the CPU build of torch.
        'bench': ['torch==2.13.0', 'transformers>=4.40'],
    },
)
