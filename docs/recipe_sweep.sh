#!/bin/bash
# The runs behind docs/recipe.md, in the order they ran (one after another on a 2-core machine; nothing else
# ran alongside the training runs unless docs/recipe.md says so). Each trains through the trainer binary and
# is scored by tools/evaluate.py on the dev split's first 20 sentences of every language (2,000 sentences).
set -euo pipefail
D=/tmp/gshard_data R=/tmp/runs
T="python -m lingvo_gshard.tools.trainer --data_dir=$D"
E="python -m lingvo_gshard.tools.evaluate --data_dir=$D --split=dev --max_sentences=20"
NODROP="task.input_dropout_prob : 0.0; task.encoder.layer_tpl.atten_dropout_prob : 0.0; task.encoder.layer_tpl.residual_dropout_prob : 0.0; task.encoder.layer_tpl.ffn_tpl.relu_dropout_prob : 0.0; task.decoder.layer_tpl.atten_dropout_prob : 0.0; task.decoder.layer_tpl.residual_dropout_prob : 0.0; task.decoder.layer_tpl.ffn_tpl.relu_dropout_prob : 0.0"
V16="task.source_vocab_size : 16000; task.target_vocab_size : 8000; input.train.vocab.source_size : 16000; input.train.vocab.target_size : 8000; input.dev.vocab.source_size : 16000; input.dev.vocab.target_size : 8000; input.test.vocab.source_size : 16000; input.test.vocab.target_size : 8000"
OLD="learner.optimizer.schedule : rsqrt; learner.optimizer.learning_rate : 1.0; learner.optimizer.warmup_steps : 1000; task.input_dropout_prob : 0.1; task.encoder.layer_tpl.atten_dropout_prob : 0.1; task.encoder.layer_tpl.residual_dropout_prob : 0.1; task.encoder.layer_tpl.ffn_tpl.relu_dropout_prob : 0.1; task.decoder.layer_tpl.atten_dropout_prob : 0.1; task.decoder.layer_tpl.residual_dropout_prob : 0.1; task.decoder.layer_tpl.ffn_tpl.relu_dropout_prob : 0.1"

python -m lingvo_gshard.tools.prepare_data --data_dir=$D

# Pilots (400 steps): the peak learning rate of the cosine schedule, 100 warm-up steps, no dropout.
# (Run with the 16k/8k vocabulary the experiments then had, now spelled out by $V16.)
for lr in 0.03 0.1 0.01; do
  $T --model=M4TinyMoE --logdir=$R/pilot_moe_cos_lr$lr --max_steps=400 --model_params_override="$V16; $NODROP; learner.optimizer.schedule : cosine; learner.optimizer.warmup_steps : 100; learner.optimizer.learning_rate : $lr; learner.eval_interval : 200; learner.save_interval : 400"
done
$E --model=M4TinyMoE --logdir=$R/pilot_moe_cos_lr0.03
# The same with an 8k source / 4k target vocabulary (the experiments' vocabulary since).
$T --model=M4TinyMoE --logdir=$R/pilot_moe_cos_lr0.03_v8k4k --max_steps=400 --model_params_override="$NODROP; learner.optimizer.schedule : cosine; learner.optimizer.warmup_steps : 100; learner.optimizer.learning_rate : 0.03; learner.eval_interval : 200; learner.save_interval : 400"
$E --model=M4TinyMoE --logdir=$R/pilot_moe_cos_lr0.03_v8k4k

# 15-minute budget (1,200 steps). s1: the recipe the experiments had before (rsqrt, 1k warm-up, dropout 0.1).
$T --model=M4TinyMoE --logdir=$R/s1_moe_old_1200 --max_steps=1200 --model_params_override="$V16; $OLD; learner.eval_interval : 400; learner.save_interval : 400"
$E --model=M4TinyMoE --logdir=$R/s1_moe_old_1200
# s2: the README's main job, from a fresh data directory (corpus and vocabularies built inside the timing).
time (python -m lingvo_gshard.tools.prepare_data --data_dir=/tmp/demo_data && python -m lingvo_gshard.tools.trainer --model=M4TinyMoEDemo --data_dir=/tmp/demo_data --logdir=$R/s2_demo_moe && python -m lingvo_gshard.tools.evaluate --model=M4TinyMoEDemo --logdir=$R/s2_demo_moe --max_sentences=50 --examples=5)
python -m lingvo_gshard.tools.evaluate --split=dev --max_sentences=20 --model=M4TinyMoEDemo --logdir=$R/s2_demo_moe
# s3: the dense model of equal per-token FLOPs, same recipe.
python -m lingvo_gshard.tools.trainer --model=M4TinyDenseDemo --data_dir=/tmp/demo_data --logdir=$R/s3_demo_dense
python -m lingvo_gshard.tools.evaluate --model=M4TinyDenseDemo --logdir=$R/s3_demo_dense --max_sentences=50 --examples=5
python -m lingvo_gshard.tools.evaluate --split=dev --max_sentences=20 --model=M4TinyDenseDemo --logdir=$R/s3_demo_dense

# --- session 4 (recipe at commit after 6c56809): probes of 160 steps, one after another, nothing alongside.
P=/tmp/probe
$T --model=M4TinyMoEDemo --logdir=$P/f32 --max_steps=160 --model_params_override="task.fprop_dtype=tf.float32,input.train.batch_rows=16"
$T --model=M4TinyMoEDemo --logdir=$P/bf16 --max_steps=160 --model_params_override="task.fprop_dtype=tf.bfloat16,input.train.batch_rows=16"
$T --model=M4TinyMoEDemo --logdir=$P/b32 --max_steps=160 --model_params_override="task.fprop_dtype=tf.bfloat16,input.train.batch_rows=32"
$T --model=M4TinyMoEDemo --logdir=$P/b64 --max_steps=120 --model_params_override="task.fprop_dtype=tf.bfloat16,input.train.batch_rows=64"
$T --model=M4TinyMoEDemo --logdir=$P/jit --max_steps=160 --jit --model_params_override="task.fprop_dtype=tf.bfloat16,input.train.batch_rows=16"
$T --model=M4TinyMoE --logdir=$P/d01 --max_steps=160 --model_params_override="task.fprop_dtype=tf.bfloat16,input.train.batch_rows=32,task.encoder.layer_tpl.atten_dropout_prob=0.1,task.decoder.layer_tpl.atten_dropout_prob=0.1,task.encoder.layer_tpl.ffn_tpl.relu_dropout_prob=0.1,task.decoder.layer_tpl.ffn_tpl.relu_dropout_prob=0.1"
$T --model=M4TinyMoEDemo --logdir=$P/dres --max_steps=160 --model_params_override="task.fprop_dtype=tf.bfloat16,input.train.batch_rows=32,task.input_dropout_prob=0.1,task.encoder.layer_tpl.residual_dropout_prob=0.1,task.decoder.layer_tpl.residual_dropout_prob=0.1"
# (the probes ran with the session-3 defaults, which the overrides above spell out as the session-4 ones now are)
# s4: the new demo recipe (bfloat16 on this CPU, 32 rows), then its test-50 decode.
$T --model=M4TinyMoEDemo --logdir=$R/s4_demo_moe
python -m lingvo_gshard.tools.evaluate --model=M4TinyMoEDemo --data_dir=$D --logdir=$R/s4_demo_moe --max_sentences=50 --examples=5
# s4_moe_2h: the 2-hour recipe (8,500 steps), started right after.
$T --model=M4TinyMoE --logdir=$R/s4_moe_2h

# --- session 5 (code at 5c5a964; /tmp/runs/s5_queue.sh, s5_queue3.sh): resume s4_moe_2h from ckpt-3574 to
# 8,500 (ckpt-4500 copied aside for the 60-minute point), then score it; then the dense run.
$T --model=M4TinyMoE --logdir=$R/s4_moe_2h
python -m lingvo_gshard.tools.evaluate --model=M4TinyMoE --data_dir=$D --logdir=$R/s4_moe_2h --max_sentences=50 --examples=5
for c in 1000 2000 4500 8500; do
  python -m lingvo_gshard.tools.evaluate --model=M4TinyMoE --data_dir=$D --logdir=$R/s4_moe_2h --split=dev --max_sentences=20 --checkpoint=$R/s4_moe_2h/ckpt-$c
done
$T --model=M4TinyDense --logdir=$R/s5_dense_2h   # stopped by SIGTERM at the session's end; the same command resumes it
# Next: finish s5_dense_2h, score it like s4_moe_2h, then the curves of both:
# python -m lingvo_gshard.tools.learning_curves --runs=MoE=$R/s4_moe_2h,Dense=$R/s5_dense_2h --plot=docs/curves_2h.png --json=docs/curves_2h.json

# --- session 9 (a slower AMD EPYC VM, reference matmul ~210 GFLOP/s). Data: prepare_data into /tmp/gshard_data.
# ref1800: the session-8 demo (3+3 layers) for 1,800 steps, then test 50 (code at 29e06a6).
$T --model=M4TinyMoEDemo --logdir=$R/ref1800 --max_steps=1800
python -m lingvo_gshard.tools.evaluate --model=M4TinyMoEDemo --data_dir=$D --logdir=$R/ref1800 --max_sentences=50 --examples=5
# Step modes, 100 steps each (/tmp/probes/speed.sh): O="learner.max_train_seconds : 0; learner.max_steps : 100;
# learner.optimizer.warmup_steps : 20; learner.eval_interval : 0; learner.save_interval : 100"
$T --model=M4TinyMoEDemo --logdir=$P/graph_bf16 --model_params_override="$O"
$T --model=M4TinyMoEDemo --logdir=$P/jit_bf16 --jit --model_params_override="$O"
LINGVO_GSHARD_BF16=0 $T --model=M4TinyMoEDemo --logdir=$P/graph_fp32 --model_params_override="$O; input.train.batch_rows : 32"
LINGVO_GSHARD_BF16=0 $T --model=M4TinyMoEDemo --logdir=$P/jit_fp32 --jit --model_params_override="$O; input.train.batch_rows : 32"
# Recipe probes at 450 s each (/tmp/probes/recipe.sh; the demo class at 3+3 layers with max_train_seconds):
for change in "" "learner.optimizer.learning_rate : 0.05" "input.train.batch_rows : 48" "input.train.batch_rows : 16" \
              "task.encoder.num_layers : 2; task.decoder.num_layers : 2"; do
  $T --model=M4TinyMoEDemo --logdir=$P/r_$RANDOM --model_params_override="learner.max_train_seconds : 450; $change"
done
# The README's main job with the new demo (2+2 layers, 900 s), on a fresh data directory (code at 9c466f7):
python -m lingvo_gshard.tools.prepare_data --data_dir=/tmp/gshard_data && python -m lingvo_gshard.tools.trainer --model=M4TinyMoEDemo --data_dir=/tmp/gshard_data --logdir=/tmp/m4tiny_moe_demo && python -m lingvo_gshard.tools.evaluate --model=M4TinyMoEDemo --logdir=/tmp/m4tiny_moe_demo --max_sentences=50 --examples=5
# --- session 10 (the same slow AMD EPYC VM, reference matmul 187-195 GFLOP/s); data in /tmp/gshard_data.
# Width/rows probes at 450 s each on the then demo (2+2, M=256, 32 rows) (/tmp/probes10/*.sh):
M128="task.model_dim : 128; task.hidden_dim : 512; task.encoder.moe_tpl.hidden_dim : 256; task.decoder.moe_tpl.hidden_dim : 256"
for change in "" "task.model_dim : 192; task.hidden_dim : 768; task.encoder.moe_tpl.hidden_dim : 384; task.decoder.moe_tpl.hidden_dim : 384" \
              "$M128" "$M128; task.encoder.num_layers : 3; task.decoder.num_layers : 3" "$M128; input.train.batch_rows : 64" \
              "$M128; input.train.batch_rows : 128"; do
  $T --model=M4TinyMoEDemo --logdir=$P/w_$RANDOM --model_params_override="learner.max_train_seconds : 450; $change"
done
# The README's main job with the new demo (M=128, 64 rows; corpus and vocabularies already built):
python -m lingvo_gshard.tools.trainer --model=M4TinyMoEDemo --data_dir=/tmp/gshard_data --logdir=/tmp/m4tiny_moe_demo && python -m lingvo_gshard.tools.evaluate --model=M4TinyMoEDemo --logdir=/tmp/m4tiny_moe_demo --max_sentences=50 --examples=5
# Length normalisation on dev 20 (each result directory moved aside before the next alpha):
for a in 0.6 1.0 1.4; do
  python -m lingvo_gshard.tools.evaluate --model=M4TinyMoEDemo --logdir=/tmp/m4tiny_moe_demo --split=dev --max_sentences=20 --length_alpha=$a
  mv /tmp/m4tiny_moe_demo/decode_dev /tmp/m4tiny_moe_demo/decode_dev_alpha$a
done

# --- session 11 (the same slow AMD EPYC VM, reference matmul 187 GFLOP/s).
# Fixed-step probes of the demo (1,520 steps, the cosine schedule ending there), then dev 200 of the 10 largest
# languages and test 50 of all (/tmp/probes11/probe.sh; DATA is the corpus' data dir):
probe() {  # probe NAME "override"
  python -m lingvo_gshard.tools.trainer --model=M4TinyMoEDemo --data_dir=${DATA:-/tmp/gshard_data} --logdir=/tmp/probes11/$1 \
    --model_params_override="learner.max_train_seconds : 0; learner.max_steps : 1520; $2"
  python -m lingvo_gshard.tools.evaluate --model=M4TinyMoEDemo --logdir=/tmp/probes11/$1 --split=dev \
    --languages=fr,uk,sv,es,ru,de,zh-CN,it,ja,pl --max_sentences=200
  python -m lingvo_gshard.tools.evaluate --model=M4TinyMoEDemo --logdir=/tmp/probes11/$1 --max_sentences=50
}
DATA=/tmp/gshard_data probe lr05 "learner.optimizer.learning_rate : 0.05"       # gettext_m4 1.0.0 (code 0422475)
python -m lingvo_gshard.tools.prepare_data --data_dir=/tmp/gshard_data_v2         # 1.1.0 (code f3cdc6c)
DATA=/tmp/gshard_data_v2 probe lr05v2 "learner.optimizer.learning_rate : 0.05"
# Distinct English targets in the first 706k examples of the training mixture (1,520 steps x ~465 examples):
python docs/runs_s11/distinct_targets.py /tmp/gshard_data 706000 10
python docs/runs_s11/distinct_targets.py /tmp/gshard_data_v2 706000
# The README's first command (install included) on a fresh data dir, code c16c6c3 (peak lr 0.05):
python -m pip install -q -e . && python -m lingvo_gshard.tools.prepare_data --data_dir=/tmp/gshard_data && python -m lingvo_gshard.tools.trainer --model=M4TinyMoEDemo --data_dir=/tmp/gshard_data --logdir=/tmp/m4tiny_moe_demo && python -m lingvo_gshard.tools.evaluate --model=M4TinyMoEDemo --logdir=/tmp/m4tiny_moe_demo --max_sentences=50 --examples=5

# --- session 12 (the same slow AMD EPYC VM). The 2-hour recipe on gettext_m4 1.1.0, nothing else running
# (code a501c0f; a 1-2 minute unit-test run beside steps ~450-560), then the whole test split (CI ran beside
# the decode: its speed is not a figure) and dev 20 of the kept checkpoints for the learning curve:
python -m lingvo_gshard.tools.trainer --model=M4TinyMoE --data_dir=/tmp/gshard_data --logdir=/tmp/runs/moe_s12
python -m lingvo_gshard.tools.evaluate --model=M4TinyMoE --logdir=/tmp/runs/moe_s12
python -m lingvo_gshard.tools.m4_report --add=moe=/tmp/runs/moe_s12@ckpt-8500
for n in 1500 3000 4500 6000 8500; do
  python -m lingvo_gshard.tools.evaluate --model=M4TinyMoE --logdir=/tmp/runs/moe_s12 --split=dev --max_sentences=20 \
    --checkpoint=/tmp/runs/moe_s12/ckpt-$n
done
python -m lingvo_gshard.tools.learning_curves --runs=MoE=/tmp/runs/moe_s12 --set=dev --average=top10 \
  --json=docs/runs_s12/curves_moe_s12_dev20.json --plot=docs/runs_s12/curves_moe_s12_dev20.png

# --- session 13 (a 2-core Intel Xeon with AMX, the session-7 kind). Decoding against Hugging Face, alone
# (code fe75573), then the 2-hour experiments' step times (throwaway log dirs, nothing else running):
python -m lingvo_gshard.tools.prepare_data --data_dir=/tmp/gshard_data
python -m lingvo_gshard.tools.decode_benchmark --data_dir=/tmp/gshard_data --json=docs/decode_benchmark_xeon_s13.json
python -m lingvo_gshard.tools.trainer --model=M4TinyMoE --data_dir=/tmp/gshard_data --logdir=/tmp/probes13/moe_t --max_steps=180
python -m lingvo_gshard.tools.trainer --model=M4TinyDense --data_dir=/tmp/gshard_data --logdir=/tmp/probes13/dense_t --max_steps=180

# --- session 14 (the AMX Xeon of session 13, /tmp kept). The dense 2-hour run (code 1e138ac), alone but for a
# 4.6-minute unit-test run near step 1,100; the VM slowed ~2x after step ~2,000:
python -m lingvo_gshard.tools.trainer --model=M4TinyDense --data_dir=/tmp/gshard_data --logdir=/tmp/runs/dense_s14
# Left for next session (whole split, report, dev 20 of the kept checkpoints, learning curves):
#   python -m lingvo_gshard.tools.evaluate --model=M4TinyDense --logdir=/tmp/runs/dense_s14
#   python -m lingvo_gshard.tools.m4_report --add=dense=/tmp/runs/dense_s14@ckpt-8500

# --- session 15 (the AMX Xeon of sessions 13-14, /tmp kept). Decoding against Hugging Face with growing
# caches (code bfd15a6), alone, twice; then the dense run's whole test split (alone), report, dev 20 of its
# kept checkpoints (CI ran beside these: their speeds are not figures):
python -m lingvo_gshard.tools.decode_benchmark --data_dir=/tmp/gshard_data --json=docs/decode_benchmark_xeon_s15.json
python -m lingvo_gshard.tools.decode_benchmark --data_dir=/tmp/gshard_data --json=docs/decode_benchmark_xeon_s15_rerun.json
python -m lingvo_gshard.tools.evaluate --model=M4TinyDense --logdir=/tmp/runs/dense_s14 --data_dir=/tmp/gshard_data
python -m lingvo_gshard.tools.m4_report --add=dense=/tmp/runs/dense_s14@ckpt-8500
for n in 2000 3000 4000 5500 6500 8500 8000; do
  python -m lingvo_gshard.tools.evaluate --model=M4TinyDense --logdir=/tmp/runs/dense_s14 --data_dir=/tmp/gshard_data \
    --split=dev --max_sentences=20 --checkpoint=/tmp/runs/dense_s14/ckpt-$n
done
# The expert-dropout probe: M4TinyMoE with dropout 0.4 on the experts' hidden activations, same 8,500 steps:
python -m lingvo_gshard.tools.trainer --model=M4TinyMoE --data_dir=/tmp/gshard_data --logdir=/tmp/runs/moe_xd_s15 \
  --model_params_override='task.encoder.moe_tpl.relu_dropout_prob : 0.4; task.decoder.moe_tpl.relu_dropout_prob : 0.4'
# Learning curves of both 2-hour runs on dev 20: MoE's points rebuilt from what session 12 committed (its
# checkpoints.jsonl and dev-20 results, laid out as a log directory), the dense run's from /tmp:
mkdir -p /tmp/moe_s12_docs && cp docs/runs_s12/moe_s12_checkpoints.jsonl /tmp/moe_s12_docs/checkpoints.jsonl
for f in docs/runs_s12/dev20/ckpt-*.json; do
  n=$(basename $f .json); mkdir -p /tmp/moe_s12_docs/decode_dev/$n; cp $f /tmp/moe_s12_docs/decode_dev/$n/results.json
done
for a in top10 high; do
  python -m lingvo_gshard.tools.learning_curves --runs=MoE=/tmp/moe_s12_docs,Dense=/tmp/runs/dense_s14 --set=dev \
    --average=$a --json=docs/runs_s15/curves_dev20_$a.json --plot=docs/runs_s15/curves_dev20_$a.png
done
# (the probe was stopped by SIGTERM at ckpt-1095 for CI and at the session's end; the same command resumes it)

# --- session 16 (the same AMX Xeon, /tmp kept; the VM lost 30-45 % of its CPU to steal, 0.9-1.9 s a step).
# The probe resumed, alone (SIGTERM-saved for each CI run; resumes exactly):
python -m lingvo_gshard.tools.trainer --model=M4TinyMoE --data_dir=/tmp/gshard_data --logdir=/tmp/runs/moe_xd_s15 \
  --model_params_override='task.encoder.moe_tpl.relu_dropout_prob : 0.4; task.decoder.moe_tpl.relu_dropout_prob : 0.4'
# RESULTS.md's hand-written analysis (docs/m4_tiny/runs/commentary.md) goes in with the rebuilt tables:
python -m lingvo_gshard.tools.m4_report
# Dev cross-entropy of the three 8,500-step runs and each one's gap to dense at equal steps. Session 12's MoE
# run left only docs/runs_s12/moe_s12_dev_xent.json; laid out as a log directory's dev_eval.jsonl:
mkdir -p /tmp/moe_s12_docs && cp docs/runs_s12/moe_s12_checkpoints.jsonl /tmp/moe_s12_docs/checkpoints.jsonl
python -c "
import json
with open('/tmp/moe_s12_docs/dev_eval.jsonl', 'w') as f:
  for r in json.load(open('docs/runs_s12/moe_s12_dev_xent.json')):
    f.write(json.dumps({'step': r['step'], 'checkpoint': 'ckpt-%d' % r['step'], 'job': 'trainer',
                        'loss': r['dev_loss'], 'xent': r['dev_xent']}) + '\n')"
for r in dense_s14:runs_s14 moe_xd_s15:runs_s16; do  # the other two from their committed copies
  mkdir -p /tmp/${r%%:*}_docs && cp docs/${r##*:}/${r%%:*}_dev_eval.jsonl /tmp/${r%%:*}_docs/dev_eval.jsonl
  cp docs/${r##*:}/${r%%:*}_checkpoints.jsonl /tmp/${r%%:*}_docs/checkpoints.jsonl
done
python -m lingvo_gshard.tools.learning_curves --metric=xent \
  --runs=Dense=/tmp/dense_s14_docs,MoE=/tmp/moe_s12_docs,MoE_xd0.4=/tmp/moe_xd_s15_docs \
  --plot=docs/m4_tiny/dev_xent.png --json=docs/m4_tiny/dev_xent.json

# --- session 17 (the same AMX Xeon, /tmp kept). The probe's last checkpoint on the whole test split:
python -m lingvo_gshard.tools.evaluate --model=M4TinyMoE --logdir=/tmp/runs/moe_xd_s15 --data_dir=/tmp/gshard_data \
  --checkpoint=/tmp/runs/moe_xd_s15/ckpt-8500
python -m lingvo_gshard.tools.m4_report --add=moe_xd=/tmp/runs/moe_xd_s15@ckpt-8500
python -m lingvo_gshard.tools.m4_report --moe=moe_xd   # the targets against M4TinyMoE's recipe (expert dropout)
python -m lingvo_gshard.tools.compare_runs --a=dense=/tmp/runs/dense_s14@ckpt-8500 \
  --b=moe_xd=/tmp/runs/moe_xd_s15@ckpt-8500 \
  --json=docs/m4_tiny/runs/significance/moe_xd-vs-dense-test-all-ckpt-8500.json
python -m lingvo_gshard.tools.model_benchmark --models=M4TinyDense,M4TinyMoE,M4TinyMoE64 --modes=jit --repeats=9
# The larger-MoE point (M4TinyMoE64 trains with expert dropout 0.4 since 1b34935):
python -m lingvo_gshard.tools.trainer --model=M4TinyMoE64 --data_dir=/tmp/gshard_data --logdir=/tmp/runs/moe64_s17
# (SIGTERM-saved at ckpt-500 for CI and at ckpt-3050 at the session's end; the same command resumes it.)
# Its dev points so far, committed:
mkdir -p docs/runs_s17 && cp /tmp/runs/moe64_s17/dev_eval.jsonl docs/runs_s17/moe64_s17_dev_eval.jsonl \
  && cp /tmp/runs/moe64_s17/checkpoints.jsonl docs/runs_s17/moe64_s17_checkpoints.jsonl

# --- session 18 (a 2-core AMD EPYC, new machine, /tmp empty): the 64-expert point from scratch
python -m lingvo_gshard.tools.prepare_data --data_dir=/tmp/gshard_data
python -m lingvo_gshard.tools.trainer --model=M4TinyMoE64 --data_dir=/tmp/gshard_data --logdir=/tmp/runs/moe64_s18
mkdir -p docs/runs_s18 && cp /tmp/runs/moe64_s18/dev_eval.jsonl docs/runs_s18/moe64_s18_dev_eval.jsonl \
  && cp /tmp/runs/moe64_s18/checkpoints.jsonl docs/runs_s18/moe64_s18_checkpoints.jsonl
# The dev-xent plot: the session-16 commands above (the /tmp/<run>_docs copies), plus this run's copy:
mkdir -p /tmp/moe64_s18_docs && cp docs/runs_s18/moe64_s18_dev_eval.jsonl /tmp/moe64_s18_docs/dev_eval.jsonl \
  && cp docs/runs_s18/moe64_s18_checkpoints.jsonl /tmp/moe64_s18_docs/checkpoints.jsonl
python -m lingvo_gshard.tools.learning_curves --metric=xent \
  --runs=Dense=/tmp/dense_s14_docs,MoE=/tmp/moe_s12_docs,MoE_xd0.4=/tmp/moe_xd_s15_docs,MoE64_xd0.4=/tmp/moe64_s18_docs \
  --plot=docs/m4_tiny/dev_xent.png --json=docs/m4_tiny/dev_xent.json
python -m lingvo_gshard.tools.evaluate --model=M4TinyMoE64 --logdir=/tmp/runs/moe64_s18 --data_dir=/tmp/gshard_data \
  --checkpoint=/tmp/runs/moe64_s18/ckpt-8500
python -m lingvo_gshard.tools.m4_report --moe=moe_xd --add=moe64=/tmp/runs/moe64_s18@ckpt-8500
mkdir -p docs/m4_tiny/runs/hypotheses
(cd /tmp/runs/moe64_s18/decode_test/ckpt-8500 && tar czf "$OLDPWD/docs/m4_tiny/runs/hypotheses/moe64-test-all-ckpt-8500.tar.gz" \
  --sort=name --mtime=2026-12-03 --owner=0 --group=0 results.json *.hyp)
