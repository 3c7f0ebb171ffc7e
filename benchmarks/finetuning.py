"""Fine-tuning throughput and classifier feature conversion: ours against Model Garden, Hugging
Face and the original release's data step.

  python benchmarks/finetuning.py --presets=mini,small --threads=1

One run measures, on the same data and configuration for every system:

1. Training examples/s of sentence-pair classification (2 labels, batch 32, sequence 128) at each
   preset (configs/bert_config_<preset>.json):
     ours:         bert_tf.model.heads.build_classifier_model trained by the generic loop
                   (bert_tf.training.loop.Trainer with classifier.TASK, the original's AdamW from
                   optimization.create_optimizer, global-norm clipping 1.0), one device;
     Model Garden: official.nlp.modeling.models.BertClassifier over networks.BertEncoder of the
                   same sizes (tanh GELU as ours, the same dropouts and initializer range), with
                   the optimizer and schedule from Model Garden's own OptimizerFactory ("adamw" =
                   legacy_adamw.AdamWeightDecay, which clips to a global norm of 1.0 itself; the
                   original's decay exclusions; linear warmup and decay) and the step of its
                   trainer (base_task.train_step with sentence_prediction's sparse categorical
                   cross-entropy, plus the accuracy count), run by a tf.function loop through
                   strategy.run over the same one-device strategy and distributed dataset;
     Hugging Face: transformers.BertForSequenceClassification (PyTorch, eager) with
                   torch.optim.AdamW (no decay for biases and LayerNorm, as HF's Trainer), a
                   linear warmup/decay schedule and clip_grad_norm_ 1.0; only when torch and
                   transformers import, otherwise the row says why it was skipped.
   Every system is fed the same random batches (a pool of --pool_batches batches, cycled) through
   tf.data (torch: the same arrays as tensors). After --warmup_steps untimed steps each (tracing,
   allocation), the systems run --steps steps in turn for --rounds rounds; the median round
   counts and the ratio ours / peer uses the medians of the same run.

2. Feature conversion (run_classifier's data step) on real sentence pairs: consecutive sentences
   of one document of --corpus, label alternating 0/1, --conversion_examples pairs, written to
   TFRecords:
     ours:     bert_tf.tasks.classifier_data.file_based_convert_examples_to_features with
               bert_tf.tokenization.FullTokenizer;
     original: `original_file_based_convert` below, the original run_classifier.py's steps written
               out: the character-at-a-time tokenizer of the original release (NaiveTokenizer of
               benchmarks/tokenization.py), pair truncation popping from the longer list (B on a
               tie), [CLS] A [SEP] B [SEP] ids, mask and segments padded with zeros, and one
               tf.train.Example of an OrderedDict of Int64List features per example serialized
               with SerializeToString() into a tf.io.TFRecordWriter.
   Both files are compared record by record (parsed messages, and our bytes against the original
   message's deterministic serialisation), so both did the same work. Tokenizers are built
   outside the timing, afresh for every repeat (ours caches ids per word); the best of
   --conversion_repeats timings counts.
"""

import collections
import importlib.util
import os
import statistics
import sys
import tempfile
import time

from absl import app
from absl import flags
from absl import logging

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers  # pylint: disable=g-import-not-at-top,wrong-import-position

DATA = "/work/shared/data"
flags.DEFINE_list("presets", ["mini", "small"],
                  "Model sizes; configs/bert_config_<preset>.json is used.")
flags.DEFINE_integer("batch_size", 32, "Training examples per step.")
flags.DEFINE_integer("seq_length", 128, "Tokens per example (training and conversion).")
flags.DEFINE_integer("num_labels", 2, "Classes of the classifier.")
flags.DEFINE_integer("steps", 4, "Timed training steps per round and system.")
flags.DEFINE_integer("rounds", 3, "Timed rounds (the systems take turns each round); the median "
                     "round counts.")
flags.DEFINE_integer("warmup_steps", 2, "Untimed steps per system before the rounds.")
flags.DEFINE_integer("pool_batches", 8, "Distinct random batches, cycled.")
flags.DEFINE_float("learning_rate", 2e-5, "Peak learning rate (10% warmup, linear decay).")
flags.DEFINE_integer("threads", 1, "TensorFlow intra- and inter-op threads (torch threads).")
flags.DEFINE_list("systems", ["ours", "model_garden", "hf_torch"],
                  "Training systems to measure.")
flags.DEFINE_string("corpus", f"{DATA}/corpora/austen_moby.txt",
                    "One sentence per line, blank lines between documents.")
flags.DEFINE_string("vocab_file", f"{DATA}/vocab/bert-base-uncased-vocab.txt", "Uncased vocab.")
flags.DEFINE_integer("conversion_examples", 5000, "Sentence pairs converted.")
flags.DEFINE_integer("conversion_repeats", 3, "Timings per converter (best counts).")
flags.DEFINE_bool("skip_training", False, "Leave out the training rows.")
flags.DEFINE_bool("skip_conversion", False, "Leave out the conversion rows.")
flags.DEFINE_string("hf_worker_dir", None, "Internal: run as the Hugging Face worker process.")
FLAGS = flags.FLAGS

GOALS = {"model_garden": 1.2, "hf_torch": 1.15, "original": 10.0}
NAMES = {"ours": "ours (bert_tf loop.Trainer)",
         "model_garden": "Model Garden BertClassifier",
         "hf_torch": "HF BertForSequenceClassification (PyTorch eager)"}


# === Training: data ===


def random_pool(np, vocab_size, num_labels, batches, batch, seq, seed=0):
  """[batches * batch, ...] random examples of the classifier's batch layout (numpy)."""
  rng = np.random.default_rng(seed)
  n = batches * batch
  lengths = rng.integers(seq // 4, seq + 1, size=n)
  positions = np.arange(seq)[None, :]
  mask = (positions < lengths[:, None]).astype(np.int32)
  ids = rng.integers(1000, vocab_size, size=(n, seq)).astype(np.int32) * mask
  ids[:, 0] = 101  # [CLS]
  types = (positions >= (lengths // 2)[:, None]).astype(np.int32) * mask
  return dict(input_word_ids=ids, input_mask=mask, input_type_ids=types,
              label_ids=rng.integers(0, num_labels, size=n).astype(np.int32),
              is_real_example=np.ones(n, np.int32))


def dataset_fn(pool, global_batch):
  """tf.distribute dataset function: the pool in order, repeated, in per-replica batches."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  def make(ctx):
    batch = ctx.get_per_replica_batch_size(global_batch) if ctx else global_batch
    dataset = tf.data.Dataset.from_tensor_slices(pool).repeat()
    return dataset.batch(batch, drop_remainder=True).prefetch(2)
  return make


# === Training: systems ===
# Each returns (run(num_steps) that blocks until the steps are done, trainable parameters).


def ours(config, pool, total_steps, warmup):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from bert_tf.model import heads  # pylint: disable=g-import-not-at-top
  from bert_tf.tasks import classifier  # pylint: disable=g-import-not-at-top
  from bert_tf.training import loop  # pylint: disable=g-import-not-at-top
  from bert_tf.training import optimization  # pylint: disable=g-import-not-at-top

  strategy = loop.select_strategy()
  with strategy.scope():
    model = heads.build_classifier_model(config, FLAGS.num_labels)
    optimizer = optimization.create_optimizer("adamw", FLAGS.learning_rate, total_steps, warmup)
    optimizer.build(model.trainable_variables)
  trainer = loop.Trainer(strategy, model, optimizer, classifier.TASK, FLAGS.batch_size)
  iterator = iter(strategy.distribute_datasets_from_function(
      dataset_fn(pool, FLAGS.batch_size)))

  def run(num_steps):
    steps, _, _ = trainer.train_loop(iterator, tf.constant(num_steps))
    if int(steps) != num_steps:
      raise RuntimeError(f"ours: non-finite loss, stopped after {int(steps)} steps")
  return run, sum(int(tf.size(v)) for v in model.trainable_variables)


def model_garden(config, pool, total_steps, warmup):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tf_keras  # pylint: disable=g-import-not-at-top
  from official.modeling.optimization import optimizer_factory  # pylint: disable=g-import-not-at-top
  from official.modeling.optimization.configs import optimization_config  # pylint: disable=g-import-not-at-top
  from official.nlp.modeling import models as mg_models  # pylint: disable=g-import-not-at-top
  from official.nlp.modeling import networks as mg_networks  # pylint: disable=g-import-not-at-top
  from bert_tf.training import loop  # pylint: disable=g-import-not-at-top

  strategy = loop.select_strategy()  # the same one-device strategy as ours
  opt_config = optimization_config.OptimizationConfig({
      "optimizer": {"type": "adamw", "adamw": {
          "weight_decay_rate": 0.01, "epsilon": 1e-6, "gradient_clip_norm": 1.0,
          "exclude_from_weight_decay": ["LayerNorm", "layer_norm", "bias"]}},
      "learning_rate": {"type": "polynomial", "polynomial": {
          "initial_learning_rate": FLAGS.learning_rate, "decay_steps": total_steps,
          "end_learning_rate": 0.0}},
      "warmup": {"type": "polynomial", "polynomial": {"warmup_steps": warmup, "power": 1.0}}})
  with strategy.scope():
    initializer = tf_keras.initializers.TruncatedNormal(stddev=config.initializer_range)
    encoder = peers.model_garden_encoder(config, mg_networks.BertEncoder, initializer)
    model = mg_models.BertClassifier(encoder, num_classes=FLAGS.num_labels,
                                     initializer=initializer,
                                     dropout_rate=config.hidden_dropout_prob)
    factory = optimizer_factory.OptimizerFactory(opt_config)
    optimizer = factory.build_optimizer(factory.build_learning_rate())
  iterator = iter(strategy.distribute_datasets_from_function(
      dataset_fn(pool, FLAGS.batch_size)))

  def replica_step(batch):
    # Model Garden's base_task.train_step with sentence_prediction's build_losses; the optimizer
    # clips to gradient_clip_norm before applying.
    features = {k: batch[k] for k in ("input_word_ids", "input_mask", "input_type_ids")}
    with tf.GradientTape() as tape:
      logits = model(features, training=True)
      loss = tf.reduce_mean(tf_keras.losses.sparse_categorical_crossentropy(
          batch["label_ids"], tf.cast(logits, tf.float32), from_logits=True))
      scaled = loss / tf.distribute.get_strategy().num_replicas_in_sync
    grads = tape.gradient(scaled, model.trainable_variables)
    optimizer.apply_gradients(list(zip(grads, model.trainable_variables)))
    correct = tf.reduce_sum(tf.cast(tf.equal(
        tf.argmax(logits, axis=-1, output_type=tf.int32), batch["label_ids"]), tf.float32))
    return loss, correct

  @tf.function
  def train_loop(num_steps):
    total = tf.constant(0.0)
    for _ in tf.range(num_steps):
      loss, _ = strategy.run(replica_step, args=(next(iterator),))
      total += strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None)
    return total

  def run(num_steps):
    if not tf.math.is_finite(train_loop(tf.constant(num_steps))):
      raise RuntimeError("Model Garden: non-finite loss")
  return run, sum(int(tf.size(v)) for v in model.trainable_variables)


def hf_torch_model(spec, pool):
  """Hugging Face's PyTorch classifier and its step function (in the worker process)."""
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  torch.set_num_threads(spec["threads"])
  torch.manual_seed(0)
  config = spec["config"]
  hf_config = transformers.BertConfig(
      vocab_size=config["vocab_size"], hidden_size=config["hidden_size"],
      num_hidden_layers=config["num_hidden_layers"],
      num_attention_heads=config["num_attention_heads"],
      intermediate_size=config["intermediate_size"], hidden_act="gelu_new",  # the tanh GELU
      hidden_dropout_prob=config["hidden_dropout_prob"],
      attention_probs_dropout_prob=config["attention_probs_dropout_prob"],
      max_position_embeddings=config["max_position_embeddings"],
      type_vocab_size=config["type_vocab_size"], initializer_range=config["initializer_range"],
      num_labels=spec["num_labels"])
  model = transformers.BertForSequenceClassification(hf_config)
  model.train()
  no_decay = ("bias", "LayerNorm.weight")
  groups = [
      {"params": [p for n, p in model.named_parameters() if not any(k in n for k in no_decay)],
       "weight_decay": 0.01},
      {"params": [p for n, p in model.named_parameters() if any(k in n for k in no_decay)],
       "weight_decay": 0.0}]
  optimizer = torch.optim.AdamW(groups, lr=spec["learning_rate"], eps=1e-6)
  scheduler = transformers.get_linear_schedule_with_warmup(optimizer, spec["warmup"],
                                                           spec["total_steps"])
  b = spec["batch_size"]
  batches = [{k: torch.as_tensor(v[i:i + b]).long() for k, v in pool.items()}
             for i in range(0, len(pool["label_ids"]), b)]
  position = [0]

  def step(batch):
    out = model(input_ids=batch["input_word_ids"], attention_mask=batch["input_mask"],
                token_type_ids=batch["input_type_ids"], labels=batch["label_ids"])
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()
    return out.loss

  def run(num_steps):
    for _ in range(num_steps):
      loss = step(batches[position[0] % len(batches)])
      position[0] += 1
    if not torch.isfinite(loss):
      raise RuntimeError("Hugging Face: non-finite loss")
  return run, sum(p.numel() for p in model.parameters() if p.requires_grad)


def hf_worker(directory):
  """The worker process of the Hugging Face row (PyTorch and TensorFlow in one process crash):
  builds the model from spec.json and pool.npz, then runs the number of steps read from each
  line of stdin and answers "done" (the parent times the round trip, as for the other rows)."""
  import json  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  with open(os.path.join(directory, "spec.json")) as f:
    spec = json.load(f)
  pool = dict(np.load(os.path.join(directory, "pool.npz")))
  run, params = hf_torch_model(spec, pool)
  print(f"params {params}", flush=True)
  for line in sys.stdin:
    run(int(line))
    print("done", flush=True)


def hf_torch(config, pool, total_steps, warmup):
  """Hugging Face's PyTorch classifier in a worker process; (None, reason) without torch."""
  import importlib.util as util  # pylint: disable=g-import-not-at-top
  import json  # pylint: disable=g-import-not-at-top
  import subprocess  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  missing = [m for m in ("torch", "transformers") if util.find_spec(m) is None]
  if missing:
    return None, f"{' and '.join(missing)} not installed"
  directory = tempfile.mkdtemp(prefix="hf_worker_")
  spec = dict(config=config.to_dict(), num_labels=FLAGS.num_labels, threads=FLAGS.threads,
              learning_rate=FLAGS.learning_rate, warmup=warmup, total_steps=total_steps,
              batch_size=FLAGS.batch_size)
  with open(os.path.join(directory, "spec.json"), "w") as f:
    json.dump(spec, f)
  np.savez(os.path.join(directory, "pool.npz"), **pool)
  worker = subprocess.Popen([sys.executable, os.path.abspath(__file__),
                             f"--hf_worker_dir={directory}"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
  first = worker.stdout.readline().split()
  if not first or first[0] != "params":
    worker.kill()
    return None, "the Hugging Face worker failed to start"

  def run(num_steps):
    worker.stdin.write(f"{num_steps}\n")
    worker.stdin.flush()
    if worker.stdout.readline().strip() != "done":
      raise RuntimeError("the Hugging Face worker stopped")
  return run, int(first[1])


SYSTEMS = {"ours": ours, "model_garden": model_garden, "hf_torch": hf_torch}


def measure_training(config, np):
  """{system: per-round examples/s} (or {system: reason skipped}) for one config."""
  pool = random_pool(np, config.vocab_size, FLAGS.num_labels, FLAGS.pool_batches,
                     FLAGS.batch_size, FLAGS.seq_length)
  total_steps = FLAGS.warmup_steps + FLAGS.steps * FLAGS.rounds
  warmup = max(1, total_steps // 10)  # the original's warmup_proportion 0.1
  runs, rates, skipped = {}, {}, {}
  for system in FLAGS.systems:
    if system not in SYSTEMS:
      raise app.UsageError(f"unknown system {system!r}; choose from {', '.join(SYSTEMS)}")
    run, params = SYSTEMS[system](config, pool, total_steps, warmup)
    if run is None:
      skipped[system] = params
      print(f"  {NAMES[system]}: skipped, {params}", flush=True)
      continue
    start = time.perf_counter()
    run(FLAGS.warmup_steps)  # tracing, allocation; not timed
    print(f"  {NAMES[system]}: {params:,} parameters, warm-up {time.perf_counter() - start:.1f} s",
          flush=True)
    runs[system] = run
    rates[system] = []
  for r in range(FLAGS.rounds):
    for system, run in runs.items():
      start = time.perf_counter()
      run(FLAGS.steps)
      rates[system].append(FLAGS.steps * FLAGS.batch_size / (time.perf_counter() - start))
    print(f"  round {r + 1}: " + ", ".join(f"{s} {v[-1]:.2f}" for s, v in rates.items()),
          flush=True)
  return rates, skipped


# === Conversion ===


def load_naive_tokenizer():
  """NaiveTokenizer from benchmarks/tokenization.py (not a package: loaded by path)."""
  path = os.path.join(REPO_ROOT, "benchmarks", "tokenization.py")
  spec = importlib.util.spec_from_file_location("benchmark_tokenization", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.NaiveTokenizer


def read_pairs(path, count):
  """(guid, sentence, next sentence of the same document, label) for the first count pairs."""
  pairs = []
  previous = None
  with open(path, encoding="utf-8") as f:
    for line in f:
      line = line.strip()
      if not line:
        previous = None  # a document ends
        continue
      if previous is not None:
        pairs.append((f"train-{len(pairs)}", previous, line, str(len(pairs) % 2)))
        if len(pairs) == count:
          break
      previous = line
  if len(pairs) < count:
    raise app.UsageError(f"{path} has only {len(pairs)} sentence pairs; "
                         f"--conversion_examples={count}")
  return pairs


def original_file_based_convert(examples, label_list, max_seq_length, tokenizer, output_file):
  """The original run_classifier.py's file_based_convert_examples_to_features, step by step.

  `tokenizer` is the original-equivalent NaiveTokenizer, whose tokenize_to_ids includes the
  vocabulary lookup the original did in convert_tokens_to_ids (one dict lookup per token less
  than the original, so if anything this side is a little fast).
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  cls_id, sep_id = tokenizer.vocab["[CLS]"], tokenizer.vocab["[SEP]"]

  def truncate_seq_pair(tokens_a, tokens_b, max_length):
    while True:
      total_length = len(tokens_a) + len(tokens_b)
      if total_length <= max_length:
        break
      if len(tokens_a) > len(tokens_b):
        tokens_a.pop()
      else:
        tokens_b.pop()

  def create_int_feature(values):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))

  label_map = {}
  for (i, label) in enumerate(label_list):
    label_map[label] = i
  writer = tf.io.TFRecordWriter(output_file)
  for example in examples:
    tokens_a = tokenizer.tokenize_to_ids(example.text_a)
    tokens_b = None
    if example.text_b:
      tokens_b = tokenizer.tokenize_to_ids(example.text_b)
    if tokens_b:
      truncate_seq_pair(tokens_a, tokens_b, max_seq_length - 3)
    elif len(tokens_a) > max_seq_length - 2:
      tokens_a = tokens_a[0:(max_seq_length - 2)]
    input_ids = []
    segment_ids = []
    input_ids.append(cls_id)
    segment_ids.append(0)
    for token in tokens_a:
      input_ids.append(token)
      segment_ids.append(0)
    input_ids.append(sep_id)
    segment_ids.append(0)
    if tokens_b:
      for token in tokens_b:
        input_ids.append(token)
        segment_ids.append(1)
      input_ids.append(sep_id)
      segment_ids.append(1)
    input_mask = [1] * len(input_ids)
    while len(input_ids) < max_seq_length:
      input_ids.append(0)
      input_mask.append(0)
      segment_ids.append(0)
    assert len(input_ids) == max_seq_length
    assert len(input_mask) == max_seq_length
    assert len(segment_ids) == max_seq_length
    label_id = label_map[example.label]

    features = collections.OrderedDict()
    features["input_ids"] = create_int_feature(input_ids)
    features["input_mask"] = create_int_feature(input_mask)
    features["segment_ids"] = create_int_feature(segment_ids)
    features["label_ids"] = create_int_feature([label_id])
    features["is_real_example"] = create_int_feature([int(True)])
    tf_example = tf.train.Example(features=tf.train.Features(feature=features))
    writer.write(tf_example.SerializeToString())
  writer.close()


def check_same_records(ours_file, original_file, expected):
  """Raises AssertionError unless both files hold the same `expected` examples."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  ours_records = [r.numpy() for r in tf.data.TFRecordDataset(ours_file)]
  original_records = [r.numpy() for r in tf.data.TFRecordDataset(original_file)]
  assert len(ours_records) == len(original_records) == expected, (
      len(ours_records), len(original_records), expected)
  for i, (a, b) in enumerate(zip(ours_records, original_records)):
    original = tf.train.Example.FromString(b)
    assert tf.train.Example.FromString(a) == original, f"record {i} differs"
    assert a == original.SerializeToString(deterministic=True), f"record {i}: bytes differ"


def measure_conversion():
  """{"ours": seconds, "original": seconds} (best of the repeats) and the pair count."""
  from bert_tf import tokenization  # pylint: disable=g-import-not-at-top
  from bert_tf.tasks import classifier_data  # pylint: disable=g-import-not-at-top
  naive_tokenizer = load_naive_tokenizer()
  examples = [classifier_data.InputExample(guid=g, text_a=a, text_b=b, label=label)
              for g, a, b, label in read_pairs(FLAGS.corpus, FLAGS.conversion_examples)]
  label_list = [str(i) for i in range(FLAGS.num_labels)]
  best = {"original": float("inf"), "ours": float("inf")}
  seconds = {}
  with tempfile.TemporaryDirectory() as tmp:
    paths = {name: os.path.join(tmp, f"{name}.tf_record") for name in best}
    for repeat in range(FLAGS.conversion_repeats):
      for name in best:  # the converters take turns
        if name == "ours":
          tokenizer = tokenization.FullTokenizer(FLAGS.vocab_file, do_lower_case=True)
          start = time.perf_counter()
          classifier_data.file_based_convert_examples_to_features(
              examples, label_list, FLAGS.seq_length, tokenizer, paths[name])
        else:
          tokenizer = naive_tokenizer(FLAGS.vocab_file, do_lower_case=True)
          start = time.perf_counter()
          original_file_based_convert(examples, label_list, FLAGS.seq_length, tokenizer,
                                      paths[name])
        seconds[name] = time.perf_counter() - start
        best[name] = min(best[name], seconds[name])
      print(f"  conversion repeat {repeat + 1}: " + ", ".join(
          f"{k} {len(examples) / v:,.0f} examples/s" for k, v in seconds.items()), flush=True)
    check_same_records(paths["ours"], paths["original"], len(examples))
  print(f"  conversion: the {len(examples)} records of both converters are identical",
        flush=True)
  return best, len(examples)


# === Main ===


def main(argv):
  del argv
  if FLAGS.hf_worker_dir:
    hf_worker(FLAGS.hf_worker_dir)
    return
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  # Threading must be fixed before TensorFlow runs its first op.
  tf.config.threading.set_intra_op_parallelism_threads(FLAGS.threads)
  tf.config.threading.set_inter_op_parallelism_threads(FLAGS.threads)
  logging.set_verbosity(logging.WARNING)
  from bert_tf.config import BertConfig  # pylint: disable=g-import-not-at-top

  rows = []  # (what, system, examples/s text, ratio text, goal text)

  def goal_text(ratio, goal):
    return f">= {goal:g}x: {'met' if ratio >= goal else 'NOT met'}"

  if not FLAGS.skip_conversion:
    print("conversion", flush=True)
    seconds, count = measure_conversion()
    ratio = seconds["original"] / seconds["ours"]
    what = f"conversion, {count} pairs"
    rows.append((what, "ours (file_based_convert_examples_to_features)",
                 f"{count / seconds['ours']:,.0f}", "", ""))
    rows.append((what, "original-equivalent (naive tokenizer, tf.train.Example)",
                 f"{count / seconds['original']:,.0f}", f"{ratio:.1f}x",
                 goal_text(ratio, GOALS["original"])))

  if not FLAGS.skip_training:
    for preset in FLAGS.presets:
      config = BertConfig.from_json_file(
          os.path.join(REPO_ROOT, "configs", f"bert_config_{preset}.json"))
      print(f"fine-tuning {preset}", flush=True)
      rates, skipped = measure_training(config, np)
      what = f"fine-tune {preset}"
      ours_rate = statistics.median(rates["ours"]) if "ours" in rates else None
      for system in FLAGS.systems:
        if system in skipped:
          rows.append((what, NAMES[system], f"skipped: {skipped[system]}", "", ""))
          continue
        median = statistics.median(rates[system])
        text = f"{median:.2f} ({min(rates[system]):.2f}-{max(rates[system]):.2f})"
        if system == "ours" or ours_rate is None:
          rows.append((what, NAMES[system], text, "", ""))
        else:
          ratio = ours_rate / median
          rows.append((what, NAMES[system], text, f"{ratio:.2f}x",
                       goal_text(ratio, GOALS[system])))

  load = os.getloadavg()
  print(f"\nbatch {FLAGS.batch_size}, sequence {FLAGS.seq_length}, {FLAGS.num_labels} labels, "
        f"{FLAGS.threads} thread(s), {FLAGS.warmup_steps} warm-up steps then {FLAGS.rounds} "
        f"rounds x {FLAGS.steps} steps (median round, min-max), conversion best of "
        f"{FLAGS.conversion_repeats}; {os.cpu_count()} CPUs, load average "
        f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
  print("| measurement | system | examples/s | ours / this | goal |")
  print("| --- | --- | --: | --: | --- |")
  for row in rows:
    print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
  app.run(main)
