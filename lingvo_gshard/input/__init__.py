"""The translation input pipeline: a built corpus (lingvo_gshard.data) -> the model's batches.

One concept per module, in pipeline order:
  tokenizer.py  SentencePiece vocabularies (temperature-sampled training text, reserved ids, language tags),
                tokenization inside tf.data and detokenization for BLEU.
  mixture.py    temperature-sampled multilingual mixtures (p_l ∝ n_l^(1/T)); one language = bilingual.
  packing.py    tokenized examples -> fixed-length rows: first-fit packing, or one example per row.
  pipeline.py   MTInput: the params an experiment's Train()/Dev()/Test() return, and its tf.data.Dataset.
The binary is tools/input_benchmark.py.
"""
