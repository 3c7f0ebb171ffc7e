"""Time to quality: masked-LM accuracy on a fixed eval file against minutes of pretraining.

Every system trains BERT (--bert_config_file, BERT-Mini by default) from scratch on the same
records, made here by our data prep (data_prep/create_pretraining_data.py, sequence 128, 20
predictions) from --corpus_file, with the same batch size, peak learning rate, warmup and
linear decay over --schedule_steps, weight decay 0.01 (not on biases and LayerNorm), epsilon
1e-6 and clipping to a global norm of 1.0:

  ours             bert_tf as run_pretraining runs it (the last layer pruned to the rows the
                   heads read, its tf.data pipeline with --seed, loop.Trainer, the original's
                   AdamWeightDecay: no Adam bias correction);
  ours_dynamic     the same with --dynamic_masking (a new mask every batch);
  ours_lamb        the same with --optimizer=lamb at --lamb_batch_size and --lamb_learning_rate
                   (the schedule scaled to the same examples);
  ours_adam_bc     not run by default: ours with --adam_bias_correction (Adam's bias
                   correction, as Model Garden's, Keras' and torch's AdamW), everything else the
                   same: what the original's missing correction does at the same learning rate;
  model_garden     Model Garden's BertPretrainerV2 over BertEncoderV2 (tf_keras) with its
                   OptimizerFactory "adamw" (as benchmarks/pretraining.py and peers.py build
                   them), on the same tf.data batches as ours;
  hf               Hugging Face BertForPreTraining (PyTorch) on the same batches (our pipeline's
                   batches decoded once), masked-LM logits computed at the masked positions
                   only, the original's loss, torch AdamW and transformers' linear schedule;
  hf_mlm           Hugging Face as its users pretrain from scratch (run_mlm's way):
                   BertForMaskedLM, transformers' DataCollatorForLanguageModeling masking the
                   same sequences anew every batch (15%, 80/10/10), masked LM only (no
                   next-sentence objective: a different objective, labelled so in the table).

The evaluation file is static-masked once (dupe_factor 1, the original's random seed) from the
last --eval_documents documents of the corpus, which no system trains on; every system computes
the original's metric_fn on the same --eval_examples instances: masked-LM accuracy (argmax ==
label, weighted by masked_lm_weights) and the weighted mean masked-LM cross-entropy, dropout
off. Each run is its own process (--threads threads; PyTorch and TensorFlow apart) with a
training clock: a run trains in calls of a few seconds and, when its clock passes one of
--eval_points points spread evenly over --budget_minutes (or one of the --eval_minutes listed),
it is evaluated with the clock stopped (so a point's accuracy is measured at most one call after
it; the table gives the steps reached). The clock starts after the first step, whose call
traces and compiles the step (reported beside the table, as process start-up and model
building are not counted: on a shared machine they vary most).
A run whose schedule ends before its budget keeps its last weights.

Output: a table (minutes to reach the best accuracy that the slowest system reaches; accuracy
at each point, median and range over --seeds; accuracy and eval loss against steps at the steps
the slowest system reached, so that speed and sample efficiency are told apart), the goals
(minutes for ours to reach Model Garden's and Hugging Face's final accuracy and final eval loss,
against theirs, read off the median curves over seeds (curves.py says why), flagged when the
peer's final accuracy is still its first evaluation's: the first plateau, where a ratio says
nothing), results.json and a PNG plot of accuracy and loss
against minutes and steps (matplotlib: pip install -e '.[benchmark]') in --output_dir.

Usage (from the repository root):
  python benchmarks/time_to_quality.py                      # 6 systems x 2 seeds x 2.5 min
  python benchmarks/time_to_quality.py --budget_minutes=30 --schedule_steps=20000 \
      --seeds=1,2,3 --output_dir=/tmp/ttq                    # longer runs
  python benchmarks/time_to_quality.py --systems=ours,model_garden --budget_minutes=1 \
      --seeds=1 --eval_points=2                              # a smoke run
  python benchmarks/time_to_quality.py --systems=ours_adam_bc,model_garden \
      --mixed_precision=bfloat16 --budget_minutes=15 --seeds=1,2,3 --eval_points=6
                                          # every system in mixed bfloat16 (AMX, TPU, GPUs)
  python benchmarks/time_to_quality.py --smoke                # seconds-long check, no figures

results.json keeps its layout (the committed files under benchmarks/results/ are read by
--from_results and by the tests) with the command, date, machine and versions of
benchmarks/results_file.py beside it; --results_file writes it elsewhere than --output_dir.
--smoke: ours and Model Garden (Hugging Face left out with a printed line), one seed, the tiny
config on 0.3 MB of the corpus, two evaluations of 64 instances within 0.1 training-clock
minutes; in a temporary folder.
"""

import contextlib
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags
from absl import logging

BENCHMARKS = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(BENCHMARKS)
sys.path.insert(0, REPO_ROOT)
sys.path.insert(0, BENCHMARKS)
import corpora  # pylint: disable=g-import-not-at-top,wrong-import-position
import curves  # pylint: disable=g-import-not-at-top,wrong-import-position
import peers  # pylint: disable=g-import-not-at-top,wrong-import-position
import results_file  # pylint: disable=g-import-not-at-top,wrong-import-position

SYSTEMS = ("ours", "ours_dynamic", "ours_lamb", "ours_adam_bc", "model_garden", "hf", "hf_mlm")
DEFAULT_SYSTEMS = ("ours", "ours_dynamic", "ours_lamb", "model_garden", "hf", "hf_mlm")
NAMES = {"ours": "ours (run_pretraining defaults)",
         "ours_dynamic": "ours --dynamic_masking",
         "ours_lamb": "ours --optimizer=lamb, larger batch",
         "ours_adam_bc": "ours with Adam bias correction",
         "model_garden": "Model Garden BertPretrainerV2",
         "hf": "HF BertForPreTraining (gathered)",
         "hf_mlm": "HF run_mlm-style (MLM only: other objective)"}
PRECISION_TEXT = {"none": "float32",
                  "bfloat16": "mixed bfloat16 (float32 weights and optimizer)"}
# Systems whose accuracy sets the target: the faithful objective (masked LM + next sentence).
TARGET_SYSTEMS = ("ours", "ours_dynamic", "ours_lamb", "ours_adam_bc", "model_garden", "hf")

flags.DEFINE_string("corpus_file", corpora.path("austen_moby"),
                    "Text in the original's format (one sentence per line, blank lines between "
                    "documents).")
flags.DEFINE_string("vocab_file", corpora.VOCAB_FILE,
                    "WordPiece vocab (uncased: --do_lower_case=True in the data prep).")
flags.DEFINE_string("bert_config_file", os.path.join(REPO_ROOT, "configs",
                                                     "bert_config_mini.json"), "Model config.")
flags.DEFINE_float("corpus_mb", 0.0, "Use only the first this many MB of the corpus (0: all).")
flags.DEFINE_integer("eval_documents", 30, "Last documents of the corpus held out for eval.")
flags.DEFINE_integer("eval_examples", 512, "At most this many eval instances (the first of the "
                     "eval file, in whole eval batches).")
flags.DEFINE_integer("eval_batch_size", 64, "Eval batch size.")
flags.DEFINE_integer("max_seq_length", 128, "Sequence length of the records.")
flags.DEFINE_integer("max_predictions_per_seq", 20, "Masked-LM predictions per sequence.")
flags.DEFINE_integer("dupe_factor", 5, "dupe_factor of the training records.")
flags.DEFINE_integer("batch_size", 32, "Global batch size (every system but ours_lamb).")
flags.DEFINE_float("learning_rate", 1e-3, "Peak learning rate.")
flags.DEFINE_integer("schedule_steps", 2000,
                     "Steps of the linear decay to 0 (num_train_steps); a run stops there.")
flags.DEFINE_integer("num_warmup_steps", 300,
                     "Linear warmup steps (50 until 2026-12-04: benchmarks/README.md says why "
                     "it changed).")
flags.DEFINE_integer("lamb_batch_size", 128, "ours_lamb's batch size.")
flags.DEFINE_float("lamb_learning_rate", 2e-3, "ours_lamb's peak learning rate.")
flags.DEFINE_float("budget_minutes", 2.5, "Training-clock minutes per run.")
flags.DEFINE_integer("eval_points", 5, "Evaluations per run, evenly spread over the budget.")
flags.DEFINE_list("eval_minutes", None,
                  "Evaluation points in training-clock minutes, ascending, instead of "
                  "--eval_points even ones (the budget is added as the last if missing), e.g. "
                  "dense points over the steep first minutes.")
flags.DEFINE_list("seeds", ["1", "2"], "Seeds (weights, data order, masks, dropout).")
flags.DEFINE_list("systems", list(DEFAULT_SYSTEMS), f"Systems, of {', '.join(SYSTEMS)}.")
flags.DEFINE_integer("threads", 2, "Threads per run (TensorFlow intra/inter-op, torch).")
flags.DEFINE_integer("ours_cpu_towers", 1,
                     "run_pretraining's --cpu_towers for our systems: each batch as this many "
                     "towers side by side, with 1 intra-op and this many inter-op threads "
                     "(instead of --threads of each); the peers keep --threads.")
flags.DEFINE_enum("mixed_precision", "none", list(PRECISION_TEXT),
                  "Compute dtype of every system, each the way its users ask for it: ours "
                  "run_pretraining's --mixed_precision (Keras' mixed_bfloat16), Model Garden "
                  "tf_keras' mixed_bfloat16 global policy (its trainer's "
                  "mixed_precision_dtype), Hugging Face torch.autocast to bfloat16 around the "
                  "forward pass (its Trainer's --bf16); weights and optimizer in float32.")
flags.DEFINE_float("call_seconds", 4.0, "Training seconds per call between clock checks.")
flags.DEFINE_string("output_dir", None,
                    "Records, results.json and time_to_quality.png (default: a new temporary "
                    "directory, kept). Records already there are reused.")
flags.DEFINE_string("worker", None, "Internal: run one system from this spec file.")
flags.DEFINE_list("from_results", None,
                  "Print the tables and draw the plot of earlier runs: one results.json, or "
                  "several (comma-separated; made with the same --budget_minutes and "
                  "evaluation points) whose runs are joined, e.g. seeds or systems run apart. The "
                  "plot goes to --output_dir (default: a new temporary directory), never beside "
                  "the results.")
flags.DEFINE_list("goal_systems", ["ours", "ours_adam_bc"],
                  "Our systems that the goal table compares with the peers (a table for each "
                  "that ran).")
results_file.define_flags(flags)
FLAGS = flags.FLAGS


# === Data (the parent process) ===


def split_corpus(directory):
  """train.txt and eval.txt in directory: the corpus's documents, the last --eval_documents
  held out. Returns (train documents, eval documents, megabytes used)."""
  limit = FLAGS.corpus_mb * 1e6 if FLAGS.corpus_mb > 0 else float("inf")
  documents, current, size = [], [], 0
  with open(FLAGS.corpus_file, encoding="utf-8") as f:
    for line in f:
      if size >= limit:
        break
      size += len(line.encode("utf-8"))
      if line.strip():
        current.append(line)
      elif current:
        documents.append(current)
        current = []
  if current:
    documents.append(current)
  if len(documents) <= FLAGS.eval_documents:
    raise app.UsageError(f"--corpus_file has {len(documents)} documents; --eval_documents="
                         f"{FLAGS.eval_documents} leaves none to train on")
  held_out = documents[-FLAGS.eval_documents:]
  for name, docs in (("train.txt", documents[:-FLAGS.eval_documents]), ("eval.txt", held_out)):
    with open(os.path.join(directory, name), "w", encoding="utf-8") as f:
      f.write("\n".join("".join(doc) for doc in docs))
  return len(documents) - len(held_out), len(held_out), size / 1e6


def make_records(directory, name, dupe_factor):
  """Records of directory/<name>.txt by data_prep/create_pretraining_data.py (the original's
  random seed and masking); reused when made from the same text with the same flags (another
  --corpus_mb or --eval_documents makes them anew). Returns (path, instances)."""
  import hashlib  # pylint: disable=g-import-not-at-top
  output = os.path.join(directory, f"{name}.tfrecord")
  text = os.path.join(directory, name + ".txt")
  with open(text, "rb") as f:
    source = hashlib.md5(f.read()).hexdigest() + (
        f" {FLAGS.vocab_file} {FLAGS.max_seq_length} {FLAGS.max_predictions_per_seq} "
        f"{dupe_factor}")
  stamp = output + ".source"
  made_from = open(stamp, encoding="utf-8").read() if os.path.exists(stamp) else None
  if made_from != source or not os.path.exists(output + ".metadata.json"):
    for path in (output, output + ".metadata.json", stamp):
      if os.path.exists(path):
        os.remove(path)
    command = [sys.executable, os.path.join(REPO_ROOT, "data_prep", "create_pretraining_data.py"),
               f"--input_file={os.path.join(directory, name + '.txt')}",
               f"--output_file={output}", f"--vocab_file={FLAGS.vocab_file}",
               "--do_lower_case=True", f"--max_seq_length={FLAGS.max_seq_length}",
               f"--max_predictions_per_seq={FLAGS.max_predictions_per_seq}",
               f"--dupe_factor={dupe_factor}"]
    subprocess.run(command, check=True, capture_output=True)
    with open(stamp, "w", encoding="utf-8") as f:
      f.write(source)
  with open(output + ".metadata.json", encoding="utf-8") as f:
    return output, json.load(f)["counts"]["instances"]


def dump_batches(records, path, batch_size, steps, seed=None, count=None):
  """Our pipeline's batches as numpy (the Hugging Face systems read them, and every system
  evaluates on the eval file's): training batches (shuffled with seed) for `steps` steps, or
  with seed None the first `count` instances in file order."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  from bert_tf.training import input_pipeline  # pylint: disable=g-import-not-at-top
  training = seed is not None
  dataset = input_pipeline.pretraining_dataset(
      records, FLAGS.max_seq_length, FLAGS.max_predictions_per_seq, batch_size,
      is_training=training, seed=seed, repeat=training)
  dataset = dataset.take(steps if training else count // batch_size)
  chunks = {}
  for batch in dataset.as_numpy_iterator():
    for key, value in batch.items():
      chunks.setdefault(key, []).append(value)
  arrays = {key: np.concatenate(values) for key, values in chunks.items()}
  np.savez(path, **arrays)
  return path


# === The training clock (each worker) ===


def drive(train, evaluate, spec, batch_size):
  """Trains with train(n) in calls of about --call_seconds until each evaluation point of the
  training clock; evaluate() -> (accuracy, loss) runs with the clock stopped. Returns the
  curve: one dict per point."""
  points, max_steps = spec["points"], spec["schedule_steps"]
  clock, steps, per_step, curve = 0.0, 0, None, []
  first_call = None
  while len(curve) < len(points):
    if steps < max_steps:
      left = points[len(curve)] - clock
      n = 1 if per_step is None else max(1, min(int(spec["call_seconds"] / per_step),
                                                math.ceil(left / per_step)))
      n = min(n, max_steps - steps)
      start = time.perf_counter()
      train(n)
      seconds = time.perf_counter() - start
      steps += n
      if first_call is None:
        first_call = seconds  # one step, tracing and compiling: reported, not on the clock
        continue
      clock += seconds
      per_step = seconds / n
    if clock < points[len(curve)] and steps < max_steps:
      continue
    start = time.perf_counter()
    accuracy, loss = evaluate()
    eval_seconds = time.perf_counter() - start
    point = dict(seconds=clock, steps=steps, examples=steps * batch_size, accuracy=accuracy,
                 loss=loss, eval_seconds=eval_seconds)
    # Every point the clock has passed (or all that are left, at the schedule's end) gets it.
    while len(curve) < len(points) and (clock >= points[len(curve)] or steps >= max_steps):
      curve.append(dict(point, point=points[len(curve)]))
    print(f"  {spec['system']} seed {spec['seed']}: {clock / 60:.2f} min, step {steps}, "
          f"accuracy {accuracy:.4f}, loss {loss:.4f} (eval {eval_seconds:.1f} s)", flush=True)
  return curve, first_call


def _set_tf_threads(threads, cpu_towers=1):
  """TensorFlow's threads: `threads` intra-op and inter-op, or with cpu_towers > 1 those
  run_pretraining --cpu_towers sets (distribution.use_cpu_towers)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  if cpu_towers > 1:
    from bert_tf.training import distribution  # pylint: disable=g-import-not-at-top
    if not distribution.use_cpu_towers(cpu_towers):
      raise RuntimeError("TensorFlow's threads were set up before the towers'")
    return tf
  tf.config.threading.set_intra_op_parallelism_threads(threads)
  tf.config.threading.set_inter_op_parallelism_threads(threads)
  return tf


def _eval_batches(spec):
  import numpy as np  # pylint: disable=g-import-not-at-top
  arrays = dict(np.load(spec["eval_npz"]))
  n = len(arrays["input_word_ids"])
  b = spec["eval_batch_size"]
  return [{k: v[i:i + b] for k, v in arrays.items()} for i in range(0, n, b)]


def _metrics(sums):
  return (sums["correct"] / max(sums["weight"], 1e-5), sums["nll"] / max(sums["weight"], 1e-5))


# === ours ===


def run_ours(spec):
  """Our model, optimizer, pipeline and Trainer, as pretraining.run_pretraining builds them."""
  towers = spec.get("cpu_towers", 1)
  tf = _set_tf_threads(spec["threads"], towers)
  import keras  # pylint: disable=g-import-not-at-top
  from bert_tf import tokenization  # pylint: disable=g-import-not-at-top
  from bert_tf.config import BertConfig  # pylint: disable=g-import-not-at-top
  from bert_tf.model.heads import build_pretraining_model  # pylint: disable=g-import-not-at-top
  # pylint: disable-next=g-import-not-at-top
  from bert_tf.training import input_pipeline, record_files, remasking
  from bert_tf.training import distribution, loop  # pylint: disable=g-import-not-at-top
  from bert_tf.training import optimization  # pylint: disable=g-import-not-at-top
  from bert_tf.training import pretraining  # pylint: disable=g-import-not-at-top

  system, seed = spec["system"], spec["seed"]
  config = BertConfig.from_dict(spec["config"])
  keras.utils.set_random_seed(seed)
  strategy = distribution.select_strategy("one_device")
  batch = spec["batch_size"]
  with strategy.scope():
    model = build_pretraining_model(config, prune_last_layer=True)
    optimizer = optimization.create_optimizer(
        "lamb" if system == "ours_lamb" else "adamw", spec["learning_rate"],
        spec["schedule_steps"], spec["warmup"],
        adam_bias_correction=system == "ours_adam_bc")
    optimizer.build(model.trainable_variables)
  trainer = loop.Trainer(strategy, model, optimizer, pretraining.TASK, batch, towers=towers)
  masking = None
  if system == "ours_dynamic":
    masking = remasking.DynamicMasking.from_vocab(
        tokenization.load_vocab(spec["vocab_file"]), seed=seed)

  def dataset_fn(ctx):
    return input_pipeline.pretraining_dataset(
        spec["train_records"], spec["max_seq_length"], spec["max_predictions_per_seq"],
        batch_size=batch, is_training=True, input_context=ctx, seed=seed,
        dynamic_masking=masking)
  iterator = distribution.data_iterator(strategy, dataset_fn)

  def train(n):
    steps, _, _ = trainer.train_loop(iterator, tf.constant(n))
    if int(steps) != n:
      raise RuntimeError(f"{system}: non-finite loss")

  batches = _eval_batches(spec)
  eval_data = record_files.autotuning_off(
      tf.data.Dataset.from_tensor_slices(_concat(batches)).batch(spec["eval_batch_size"]))

  def evaluate():
    # Read as run_pretraining reads its eval data (distribution.data_iterator: deleting the iterator
    # does not wait for tf.data's autotuning thread).
    it = distribution.data_iterator(strategy, lambda ctx: eval_data)
    sums = [{k: v.numpy() for k, v in trainer.eval_step(it).items()} for _ in batches]
    results = pretraining.eval_metrics_from_sums(sums)
    return results["masked_lm_accuracy"], results["masked_lm_loss"]
  params = sum(int(tf.size(v)) for v in model.trainable_variables)
  return train, evaluate, batch, params


def _concat(batches):
  import numpy as np  # pylint: disable=g-import-not-at-top
  return {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}


# === Model Garden ===


def run_model_garden(spec):
  """BertPretrainerV2 (as benchmarks/pretraining.py) with OptimizerFactory's adamw (peers.py)."""
  tf = _set_tf_threads(spec["threads"])
  import tf_keras  # pylint: disable=g-import-not-at-top
  from bert_tf.config import BertConfig  # pylint: disable=g-import-not-at-top
  from bert_tf.training import input_pipeline  # pylint: disable=g-import-not-at-top

  config = BertConfig.from_dict(spec["config"])
  tf_keras.utils.set_random_seed(spec["seed"])
  initializer = tf_keras.initializers.TruncatedNormal(stddev=config.initializer_range)
  model = peers.model_garden_pretrainer(config, initializer)
  optimizer = peers.model_garden_adamw(spec["learning_rate"], spec["schedule_steps"],
                                       spec["warmup"])  # clips to 1.0 itself
  batch = spec["batch_size"]
  dataset = input_pipeline.pretraining_dataset(
      spec["train_records"], spec["max_seq_length"], spec["max_predictions_per_seq"], batch,
      is_training=True, seed=spec["seed"])
  iterator = iter(dataset)
  names = ("input_word_ids", "input_mask", "input_type_ids", "masked_lm_positions")

  def losses(batch_, training):
    outputs = model({k: batch_[k] for k in names}, training=training)
    weights = tf.cast(batch_["masked_lm_weights"], tf.float32)
    logits = tf.cast(outputs["mlm_logits"], tf.float32)
    nll = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=batch_["masked_lm_ids"],
                                                         logits=logits)
    correct = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32),
                               batch_["masked_lm_ids"]), tf.float32)
    nsp = tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=tf.reshape(batch_["next_sentence_labels"], [-1]),
        logits=tf.cast(outputs["next_sentence"], tf.float32))
    loss = tf.reduce_sum(weights * nll) / (tf.reduce_sum(weights) + 1e-5) + tf.reduce_mean(nsp)
    return loss, dict(nll=tf.reduce_sum(weights * nll), correct=tf.reduce_sum(weights * correct),
                      weight=tf.reduce_sum(weights))

  def train_step(batch_):
    with tf.GradientTape() as tape:
      loss, _ = losses(batch_, True)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss

  @tf.function
  def train_loop(num_steps):
    loss = tf.constant(0.0)
    for _ in tf.range(num_steps):
      loss = train_step(next(iterator))
    return loss

  eval_step = tf.function(lambda batch_: losses(batch_, False)[1])
  batches = _eval_batches(spec)

  def train(n):
    if not math.isfinite(float(train_loop(tf.constant(n)))):
      raise RuntimeError("model_garden: non-finite loss")

  def evaluate():
    sums = {"nll": 0.0, "correct": 0.0, "weight": 0.0}
    for b in batches:
      for k, v in eval_step({k: tf.constant(v) for k, v in b.items()}).items():
        sums[k] += float(v)
    return _metrics(sums)
  params = sum(int(tf.size(v)) for v in model.trainable_variables)
  return train, evaluate, batch, params


# === Hugging Face (PyTorch) ===


def run_hf(spec):
  """BertForPreTraining (gathered masked-LM logits, the original's loss) or, for hf_mlm,
  BertForMaskedLM with DataCollatorForLanguageModeling's masks, on our batches' sequences."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  torch.set_num_threads(spec["threads"])
  torch.manual_seed(spec["seed"])
  mlm_only = spec["system"] == "hf_mlm"
  bf16 = spec["mixed_precision"] == "bfloat16"
  autocast = lambda: torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16)
  hf_config = peers.hf_bert_config(spec["config"])
  model = (transformers.BertForMaskedLM(hf_config) if mlm_only
           else transformers.BertForPreTraining(hf_config))
  optimizer, scheduler = peers.hf_adamw(model, spec["learning_rate"], spec["warmup"],
                                        spec["schedule_steps"])
  data = dict(np.load(spec["train_npz"]))
  b = spec["batch_size"]
  n_batches = len(data["input_word_ids"]) // b
  position = [0]
  collator = None
  if mlm_only:
    tokenizer = transformers.BertTokenizerFast(vocab_file=spec["vocab_file"], do_lower_case=True)
    collator = transformers.DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15,
                                                            seed=spec["seed"])
    special = torch.as_tensor(sorted(tokenizer.all_special_ids))
    # The sequences without their static masks: the original tokens back at the masked places.
    ids = data["input_word_ids"].copy()
    rows, slots = np.nonzero(data["masked_lm_weights"] > 0)
    ids[rows, data["masked_lm_positions"][rows, slots]] = data["masked_lm_ids"][rows, slots]
    data["input_word_ids"] = ids

  def tensors(arrays, i, size):
    return {k: torch.as_tensor(v[i:i + size]).long() for k, v in arrays.items()
            if k != "masked_lm_weights"}, torch.as_tensor(arrays["masked_lm_weights"][i:i + size])

  def gathered_logits(batch, positions):
    hidden = model.bert(input_ids=batch["input_word_ids"], attention_mask=batch["input_mask"],
                        token_type_ids=batch["input_type_ids"])
    sequence = hidden.last_hidden_state
    index = positions.unsqueeze(-1).expand(-1, -1, sequence.shape[-1])
    at_masks = torch.gather(sequence, 1, index)
    return model.cls.predictions(at_masks), getattr(hidden, "pooler_output", None)

  def step():
    batch, weights = tensors(data, (position[0] % n_batches) * b, b)
    position[0] += 1
    with autocast():  # the forward pass and the loss; backward outside, as autocast asks
      if mlm_only:
        mask = torch.isin(batch["input_word_ids"], special)
        inputs, labels = collator.torch_mask_tokens(batch["input_word_ids"].clone(),
                                                    special_tokens_mask=mask)
        loss = model(input_ids=inputs, attention_mask=batch["input_mask"],
                     token_type_ids=batch["input_type_ids"], labels=labels).loss
      else:
        mlm_logits, pooled = gathered_logits(batch, batch["masked_lm_positions"])
        nll = torch.nn.functional.cross_entropy(mlm_logits.flatten(0, 1).float(),
                                                batch["masked_lm_ids"].flatten(),
                                                reduction="none").view(weights.shape)
        nsp = torch.nn.functional.cross_entropy(model.cls.seq_relationship(pooled).float(),
                                                batch["next_sentence_labels"].view(-1))
        loss = (weights * nll).sum() / (weights.sum() + 1e-5) + nsp
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()
    return loss

  def train(n):
    model.train()
    for _ in range(n):
      loss = step()
    if not torch.isfinite(loss):
      raise RuntimeError(f"{spec['system']}: non-finite loss")

  eval_arrays = dict(np.load(spec["eval_npz"]))

  def evaluate():
    model.eval()
    sums = {"nll": 0.0, "correct": 0.0, "weight": 0.0}
    eb = spec["eval_batch_size"]
    with torch.no_grad(), autocast():
      for i in range(0, len(eval_arrays["input_word_ids"]), eb):
        batch, weights = tensors(eval_arrays, i, eb)
        # The same logits as the full model's at the masked positions (hf_mlm's too: its
        # vocabulary projection is computed where it is read, off the clock either way).
        logits, _ = gathered_logits(batch, batch["masked_lm_positions"])
        logits = logits.float()
        nll = torch.nn.functional.cross_entropy(logits.flatten(0, 1),
                                                batch["masked_lm_ids"].flatten(),
                                                reduction="none").view(weights.shape)
        correct = (logits.argmax(-1) == batch["masked_lm_ids"]).float()
        sums["nll"] += float((weights * nll).sum())
        sums["correct"] += float((weights * correct).sum())
        sums["weight"] += float(weights.sum())
    return _metrics(sums)
  params = sum(p.numel() for p in model.parameters() if p.requires_grad)
  return train, evaluate, b, params


@contextlib.contextmanager
def precision(spec):
  """The run's --mixed_precision for a TensorFlow system, around its building and training
  (Hugging Face's autocast is entered around its forward passes, in run_hf)."""
  mixed = spec["mixed_precision"]
  if spec["system"].startswith("hf") or mixed == "none":
    yield
  elif spec["system"] == "model_garden":
    import tf_keras  # pylint: disable=g-import-not-at-top
    tf_keras.mixed_precision.set_global_policy(f"mixed_{mixed}")
    try:
      yield
    finally:
      tf_keras.mixed_precision.set_global_policy("float32")
  else:
    from bert_tf.training import distribution  # pylint: disable=g-import-not-at-top
    with distribution.dtype_policy(mixed):
      yield


def worker(spec_path):
  """One (system, seed) run: its curve and facts into spec["output"]."""
  started = time.perf_counter()
  with open(spec_path, encoding="utf-8") as f:
    spec = json.load(f)
  build = run_hf if spec["system"].startswith("hf") else (
      run_model_garden if spec["system"] == "model_garden" else run_ours)
  with precision(spec):
    train, evaluate, batch, params = build(spec)
    startup = time.perf_counter() - started
    curve, first_call = drive(train, evaluate, spec, batch)
  result = dict(system=spec["system"], seed=spec["seed"], batch_size=batch, parameters=params,
                startup_seconds=startup, first_call_seconds=first_call, curve=curve)
  with open(spec["output"], "w", encoding="utf-8") as f:
    json.dump(result, f)


# === The table and the plot (the parent) ===


# The goals: ours reaches a peer's quality in at most this share of its time.
GOALS = (("model_garden", 0.7), ("hf", 0.85))


def report_goals(by_system, ours="ours"):
  """Prints, for each peer of GOALS that ran, curves.goal_rows: the minutes at which the peer's
  and `ours`' (one of our systems) median curves reach the peer's final quality and the point
  halfway to it, their ratio against the goal, and how many seeds of each reach it."""
  if ours not in by_system:
    return
  print(f"\nGoals: minutes for {NAMES[ours]} to reach a peer's quality, against the peer's "
        "own (where the median curves over seeds reach it, interpolated between evaluations; "
        "a seed that never reaches it counts as later than every seed that does):\n")
  print("| peer | target | value | peer's minutes to it | ours' minutes to it | ratio | goal | "
        "verdict | seeds reaching it (peer, ours) | ratio over seed resamples: 5-95%, met in |")
  print("| --- | --- | --: | --: | --: | --: | --: | --- | --- | --- |")
  fmt = lambda m: "-" if m is None else f"{m:.2f}"  # pylint: disable=unnecessary-lambda-assignment
  for peer, bound in GOALS:
    if peer not in by_system:
      continue
    spread = curves.ratio_spread(by_system[peer], by_system[ours], bound)
    for row in curves.goal_rows(by_system[peer], by_system[ours], bound):
      if row["ratio"] is None:
        verdict = "ours did not reach it" if row["ours_minutes"] is None else "-"
      else:
        verdict = "met" if row["met"] else "missed"
        if f"{row['ratio']:.2f}" == f"{bound:.2f}":
          verdict += f" ({row['ratio']:.4f})"  # at the bound to two places: the deciding digits
      if row["first_plateau"]:
        verdict = "not resolved: the peer's first evaluation had it (the first plateau)"
      elif row["plateau"]:
        verdict += " (on a plateau: within the noise)"
      if row["ours_at_first"]:
        verdict += "; ours had it at its first evaluation (its time is an upper bound)"
      ratio = "-" if row["ratio"] is None else f"{row['ratio']:.2f}"
      print(f"| {NAMES[peer]} | {row['target']} | {row['value']:.4f} | "
            f"{fmt(row['peer_minutes'])} | {fmt(row['ours_minutes'])} | {ratio} | <= {bound:g} | "
            f"{verdict} | {row['peer_seeds']}, {row['ours_seeds']} | "
            f"{_spread_text(spread.get(row['target']))} |")


def _spread_text(spread):
  """curves.ratio_spread's entry for one target as '0.62-0.78, 64%' ('never' for a percentile
  that falls on resamples in which ours' median curve never reached the target)."""
  if spread is None:
    return "-"
  low, high, met = spread
  low, high = ("never" if math.isinf(r) else f"{r:.2f}" for r in (low, high))
  return f"{low}-{high}, {met:.0%}"


def joined_results(paths):
  """The runs of several results.json files as one: their evaluation points, precision and
  recipe (curves.recipe_differences) must be the same, and no system and seed may come twice
  (app.UsageError naming the files)."""
  joined, origin, settings = None, {}, []
  for path in paths:
    with open(path, encoding="utf-8") as f:
      saved = json.load(f)
    if joined is None:
      joined = dict(saved, runs=[])
    elif saved["points"] != joined["points"]:
      raise app.UsageError(f"--from_results: {path} was evaluated at other points than "
                           f"{paths[0]} (another --budget_minutes, --eval_points or "
                           "--eval_minutes): its runs cannot share a table")
    elif saved.get("mixed_precision", "none") != joined.get("mixed_precision", "none"):
      raise app.UsageError(f"--from_results: {path} ran with --mixed_precision="
                           f"{saved.get('mixed_precision', 'none')}, {paths[0]} with "
                           f"{joined.get('mixed_precision', 'none')}: its runs cannot share a "
                           "table")
    differences = curves.recipe_differences(saved["settings"], joined["settings"])
    if differences:
      raise app.UsageError(f"--from_results: {path} trained with another recipe than "
                           f"{paths[0]} ({'; '.join(differences)}): its runs cannot share a "
                           "table")
    for run in saved["runs"]:
      key = (run["system"], run["seed"])
      if key in origin:
        raise app.UsageError(f"--from_results: {run['system']} seed {run['seed']} is in both "
                             f"{origin[key]} and {path}; give each run once")
      origin[key] = path
      joined["runs"].append(run)
    settings.append(saved["settings"] if len(paths) == 1 else f"{path}: {saved['settings']}")
  joined["settings"] = "\n".join(settings)
  return joined


def report(runs, points, settings_text):
  """Prints the tables; returns the target accuracy."""
  systems = [s for s in FLAGS.systems if any(r["system"] == s for r in runs)]
  by_system = {s: [r for r in runs if r["system"] == s] for s in systems}
  best = {s: statistics.median([max(p["accuracy"] for p in r["curve"]) for r in rs])
          for s, rs in by_system.items()}
  faithful = [s for s in systems if s in TARGET_SYSTEMS] or systems
  slowest = min(faithful, key=lambda s: best[s])
  target = best[slowest]
  print(f"\n{settings_text}")
  print(f"\nTarget: {target:.4f}, the best masked-LM accuracy (median over seeds) of the slowest "
        f"system, {NAMES[slowest]}.\n")
  if curves.reached_at_first_evaluation(by_system, target):
    print("Every system had the target at its first evaluation, so the minutes below are that "
          "evaluation's time and say nothing about speed: the slowest system learned too little "
          "in the budget. Run longer (--budget_minutes) or evaluate earlier (--eval_minutes).\n")
  print("| system | minutes to the target (median curve; seeds' range) | best accuracy | "
        "steps in budget | examples/s (training clock) | tracing + first call (s) |")
  print("| --- | --: | --: | --: | --: | --: |")
  for s, rs in by_system.items():
    # The median curve's first evaluation at or past the target (see curves.py); the range is
    # the seeds' own, of those that reach it.
    at = curves.minutes_to(curves.median_curve(rs), target)
    reached = [m for m in (curves.minutes_to(r["curve"], target) for r in rs) if m is not None]
    text = "not reached" if at is None else f"{at:.2f}"
    if len(rs) > 1 and reached:
      text += f" ({min(reached):.2f}-{max(reached):.2f})"
    if len(reached) < len(rs):
      text += f", {len(reached)} of {len(rs)} seeds reach it"
    rate = [(r["curve"][-1]["examples"] - r["batch_size"]) / max(r["curve"][-1]["seconds"], 1e-9)
            for r in rs]
    best_accuracy = curves.median_range([max(p["accuracy"] for p in r["curve"]) for r in rs])
    first_call = statistics.median([r["first_call_seconds"] for r in rs])
    print(f"| {NAMES[s]} | {text} | {best_accuracy} "
          f"| {statistics.median([r['curve'][-1]['steps'] for r in rs]):.0f} | "
          f"{statistics.median(rate):.1f} | {first_call:.1f} |")
  print("\nMasked-LM accuracy at each point of the training clock (median, min-max over seeds):\n")
  print("| system | " + " | ".join(f"{p / 60:.2f} min" for p in points) + " |")
  print("| --- |" + " --: |" * len(points))
  for s, rs in by_system.items():
    cells = [curves.median_range([r["curve"][i]["accuracy"] for r in rs])
             for i in range(len(points))]
    print(f"| {NAMES[s]} | " + " | ".join(cells) + " |")
  print("\nMasked-LM loss on the eval file at the last point (median over seeds): " + ", ".join(
      f"{NAMES[s]} {statistics.median([r['curve'][-1]['loss'] for r in rs]):.3f}"
      for s, rs in by_system.items()))
  # Accuracy against steps: at the steps the system with the fewest reached at each point.
  same_batch = [s for s in faithful if s != "ours_lamb"] or systems
  fewest = min(same_batch, key=lambda s: statistics.median([r["curve"][-1]["steps"]
                                                           for r in by_system[s]]))
  grid = [statistics.median([r["curve"][i]["steps"] for r in by_system[fewest]])
          for i in range(len(points))]
  grid = sorted(set(int(g) for g in grid if g > 0))
  lamb_note = ""
  if "ours_lamb" in by_system:  # the batch sizes the runs recorded, not this invocation's flags
    lamb_note = (f"; ours_lamb's steps are {by_system['ours_lamb'][0]['batch_size']}/"
                 f"{by_system[fewest][0]['batch_size']} times larger")
  for key, _, label in curves.METRICS:
    print(f"\n{label[0].upper() + label[1:]} against steps (interpolated between evaluations; "
          f"the steps {NAMES[fewest]} reached at the points{lamb_note}):\n")
    print("| system | " + " | ".join(f"step {g}" for g in grid) + " |")
    print("| --- |" + " --: |" * len(grid))
    for s, rs in by_system.items():
      cells = []
      for g in grid:
        values = [v for v in (curves.interpolate(r["curve"], "steps", g, key) for r in rs)
                  if v is not None]
        cells.append(curves.median_range(values) if len(values) == len(rs) else "-")
      print(f"| {NAMES[s]} | " + " | ".join(cells) + " |")
  for ours in FLAGS.goal_systems:
    report_goals(by_system, ours)
  return target


def plot(runs, target, path, mixed_precision):
  """Accuracy against training minutes and against steps, median and range over seeds; the
  path, or None (printed) without matplotlib."""
  try:
    import matplotlib  # pylint: disable=g-import-not-at-top
  except ImportError:
    print("plot: none, matplotlib is not installed (pip install -e '.[benchmark]')")
    return None
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  figure, axes = plt.subplots(2, 2, figsize=(12, 8.5))
  for s in FLAGS.systems:
    rs = [r for r in runs if r["system"] == s]
    if not rs:
      continue
    median = curves.median_curve(rs)  # the curve the goal table reads its minutes from
    for row, (metric, _, _) in enumerate(curves.METRICS):
      for column, (key, scale) in enumerate((("seconds", 60.0), ("steps", 1.0))):
        axis = axes[row][column]
        xs = [p[key] / scale for p in median]
        ys = [[r["curve"][i][metric] for r in rs] for i in range(len(median))]
        line, = axis.plot(xs, [p[metric] for p in median], marker="o", label=NAMES[s],
                          linestyle="--" if s == "hf_mlm" else "-")
        if len(rs) > 1:
          axis.fill_between(xs, [min(y) for y in ys], [max(y) for y in ys],
                            color=line.get_color(), alpha=0.15)
  steps_label = "steps (ours_lamb: larger batch)" if any(
      r["system"] == "ours_lamb" for r in runs) else "steps"
  for row, (metric, _, label) in enumerate(curves.METRICS):
    for column, x_label in enumerate(("training-clock minutes (eval excluded)", steps_label)):
      axis = axes[row][column]
      if metric == "accuracy":
        axis.axhline(target, color="grey", linewidth=0.8, linestyle=":")
      axis.set_xlabel(x_label)
      axis.set_ylabel(f"{label} (fixed eval file)")
      axis.grid(alpha=0.3)
  by_time = axes[0][0]
  by_time.legend(fontsize=8)
  figure.suptitle("Time to quality: BERT pretraining from scratch, median and range over seeds; "
                  f"{PRECISION_TEXT[mixed_precision]}", fontsize=10)
  figure.tight_layout()
  figure.savefig(path, dpi=110)
  plt.close(figure)
  return path


def apply_smoke():
  """--smoke's settings (the module docstring)."""
  FLAGS.systems = results_file.without_torch(
      [s for s in FLAGS.systems if s in ("ours", "model_garden", "hf")], True)
  FLAGS.seeds, FLAGS.budget_minutes, FLAGS.eval_points, FLAGS.eval_minutes = ["1"], 0.1, 2, None
  FLAGS.bert_config_file = os.path.join(REPO_ROOT, "configs", "bert_config_tiny.json")
  FLAGS.corpus_mb, FLAGS.eval_documents, FLAGS.eval_examples = 0.3, 8, 64
  FLAGS.eval_batch_size, FLAGS.dupe_factor, FLAGS.call_seconds = 32, 1, 1.0
  FLAGS.schedule_steps, FLAGS.num_warmup_steps, FLAGS.ours_cpu_towers = 200, 20, 1
  FLAGS.output_dir = FLAGS.output_dir or results_file.smoke_dir("time_to_quality")


def main(argv):
  del argv
  if FLAGS.worker:
    worker(FLAGS.worker)
    return
  if FLAGS.smoke:
    apply_smoke()
  if FLAGS.from_results:
    saved = joined_results(FLAGS.from_results)
    FLAGS.systems = [s for s in SYSTEMS if any(r["system"] == s for r in saved["runs"])]
    target = report(saved["runs"], saved["points"], saved["settings"])
    directory = FLAGS.output_dir or tempfile.mkdtemp(prefix="time_to_quality_")
    os.makedirs(directory, exist_ok=True)
    path = plot(saved["runs"], target, os.path.join(directory, "time_to_quality.png"),
                saved.get("mixed_precision", "none"))
    if path:
      print(f"plot: {path}")
    return
  logging.set_verbosity(logging.WARNING)
  unknown = [s for s in FLAGS.systems if s not in SYSTEMS]
  if unknown:
    raise app.UsageError(f"unknown --systems {unknown}; choose from {', '.join(SYSTEMS)}")
  seeds = [int(s) for s in FLAGS.seeds]
  try:
    points = curves.evaluation_points(FLAGS.budget_minutes, FLAGS.eval_points,
                                      FLAGS.eval_minutes)
  except ValueError as e:
    raise app.UsageError(str(e)) from None
  directory = FLAGS.output_dir or tempfile.mkdtemp(prefix="time_to_quality_")
  os.makedirs(directory, exist_ok=True)
  from bert_tf.config import BertConfig  # pylint: disable=g-import-not-at-top
  config = BertConfig.from_json_file(FLAGS.bert_config_file)
  started = time.time()
  train_docs, eval_docs, megabytes = split_corpus(directory)
  train_records, train_count = make_records(directory, "train", FLAGS.dupe_factor)
  eval_records, eval_count = make_records(directory, "eval", 1)
  # --eval_examples is a cap: a corpus whose held-out documents make fewer instances is
  # evaluated on all of them (whole eval batches), and says so.
  eval_examples = min(FLAGS.eval_examples, eval_count)
  eval_examples -= eval_examples % FLAGS.eval_batch_size
  if not eval_examples:
    raise app.UsageError(f"the eval file holds {eval_count} instances, fewer than one "
                         f"--eval_batch_size={FLAGS.eval_batch_size}: raise --eval_documents")
  eval_npz = dump_batches(eval_records, os.path.join(directory, "eval.npz"),
                          FLAGS.eval_batch_size, 0, count=eval_examples)
  print(f"records: {train_count} training instances from {train_docs} documents, "
        f"{eval_examples} eval instances (of {eval_count}) from {eval_docs} held-out "
        f"documents; {megabytes:.1f} MB of {FLAGS.corpus_file} "
        f"({time.time() - started:.0f} s)", flush=True)
  runs = []
  total = len(seeds) * len(FLAGS.systems)
  bench_start = time.time()
  # Seeds outermost: the systems take turns, so a change of the machine's load is shared.
  for seed in seeds:
    train_npz = None
    if any(s.startswith("hf") for s in FLAGS.systems):
      train_npz = dump_batches(train_records, os.path.join(directory, f"train_{seed}.npz"),
                               FLAGS.batch_size, FLAGS.schedule_steps, seed=seed)
    for system in FLAGS.systems:
      lamb = system == "ours_lamb"
      scale = FLAGS.lamb_batch_size / FLAGS.batch_size if lamb else 1.0
      spec = dict(system=system, seed=seed, config=config.to_dict(), threads=FLAGS.threads,
                  cpu_towers=FLAGS.ours_cpu_towers if system.startswith("ours") else 1,
                  train_records=train_records, train_npz=train_npz, eval_npz=eval_npz,
                  vocab_file=FLAGS.vocab_file, max_seq_length=FLAGS.max_seq_length,
                  max_predictions_per_seq=FLAGS.max_predictions_per_seq,
                  batch_size=FLAGS.lamb_batch_size if lamb else FLAGS.batch_size,
                  learning_rate=FLAGS.lamb_learning_rate if lamb else FLAGS.learning_rate,
                  schedule_steps=max(1, round(FLAGS.schedule_steps / scale)),
                  warmup=round(FLAGS.num_warmup_steps / scale), points=points,
                  call_seconds=FLAGS.call_seconds, eval_batch_size=FLAGS.eval_batch_size,
                  mixed_precision=FLAGS.mixed_precision,
                  output=os.path.join(directory, f"run_{system}_{seed}.json"))
      spec_path = os.path.join(directory, f"spec_{system}_{seed}.json")
      with open(spec_path, "w", encoding="utf-8") as f:
        json.dump(spec, f)
      done = len(runs)
      elapsed = time.time() - bench_start
      eta = elapsed / done * (total - done) if done else (points[-1] + 90) * total
      print(f"run {done + 1}/{total}: {system} seed {seed} (elapsed {elapsed / 60:.1f} min, "
            f"ETA {eta / 60:.1f} min)", flush=True)
      subprocess.run([sys.executable, os.path.abspath(__file__), f"--worker={spec_path}"],
                     check=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
      with open(spec["output"], encoding="utf-8") as f:
        runs.append(json.load(f))
  load = os.getloadavg()
  settings_text = (
      curves.recipe_text(config.num_hidden_layers, config.hidden_size,
                         os.path.basename(FLAGS.bert_config_file), FLAGS.max_seq_length,
                         FLAGS.max_predictions_per_seq, FLAGS.batch_size, FLAGS.lamb_batch_size,
                         FLAGS.learning_rate, FLAGS.lamb_learning_rate, FLAGS.num_warmup_steps,
                         FLAGS.schedule_steps) +
      f"; {PRECISION_TEXT[FLAGS.mixed_precision]}; budget "
      f"{FLAGS.budget_minutes:g} training-clock minutes per run, {len(points)} "
      f"evaluations of {eval_examples} held-out instances; seeds "
      f"{','.join(map(str, seeds))}; {FLAGS.threads} threads per run"
      + (f" (ours: --cpu_towers={FLAGS.ours_cpu_towers}, 1 intra-op and "
         f"{FLAGS.ours_cpu_towers} inter-op threads)" if FLAGS.ours_cpu_towers > 1 else "")
      + f"; {peers.kernels_text()}; "
      f"{os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
      f"benchmark wall time {(time.time() - started) / 60:.1f} min")
  target = report(runs, points, settings_text)
  results_path = FLAGS.results_file or os.path.join(directory, "results.json")
  shared = results_file.record("time_to_quality", None, FLAGS.smoke)
  del shared["results"], shared["benchmark"]
  results_file.write_json(results_path, dict(
      settings=settings_text, points=points, target=target,
      mixed_precision=FLAGS.mixed_precision, runs=runs, **shared))
  plot_path = plot(runs, target, os.path.join(directory, "time_to_quality.png"),
                   FLAGS.mixed_precision)
  print(f"\nresults: {results_path}" + (f"\nplot: {plot_path}" if plot_path else ""))


if __name__ == "__main__":
  app.run(main)
