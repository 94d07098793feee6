"""Reports: ΔBLEU against bilingual baselines, paired-bootstrap significance, learning curves."""
