"""Fine-tuning throughput (classifier and tagger) and classifier feature conversion: ours against
Model Garden, Hugging Face and the original release's data step.

  python benchmarks/finetuning.py --presets=mini,small --threads=1

One run measures, on the same data and configuration for every system:

1. Training examples/s of sentence-pair classification (2 labels, batch 32, sequence 128) at each
   preset (configs/bert_config_<preset>.json):
     ours:         bert_tf.tasks.classifier.head.build_classifier_model trained by the generic loop
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
   counts and the ratio ours / peer uses the medians of the same run. The systems, the rounds
   and the rows are benchmarks/harness.py's (shared with squad.py); this script names the
   classifier's pieces.

2. Training examples/s of token classification (the tagger of run_ner; --tagging_labels labels,
   9 as CoNLL-2003's IOB tags, same batch, sequence, presets, optimizer settings and rounds) at
   each preset, on random batches of the tagger's layout: the same ids and lengths as above,
   one segment, and label_mask 1 on a random --tagging_labelled share (0.7) of the positions
   between [CLS] and [SEP] (a word's first piece), label_ids drawn there (O for 83%, about
   CoNLL-2003's share of O tokens), 0 elsewhere:
     ours:         bert_tf.tasks.tagging.head.build_tagger_model trained by loop.Trainer with
                   tagging.TASK (mean cross-entropy over the labelled positions), the same
                   optimizer;
     Model Garden: models.BertTokenClassifier over the same networks.BertEncoder, as built by
                   its tagging task (output_encoder_outputs=True), trained with that task's
                   build_losses (labels -1 where label_mask is 0, as its records carry them;
                   cross-entropy weighted by labels >= 0, divided by their count; the task has
                   no training metrics), the same optimizer and loop as above;
     Hugging Face: transformers.BertForTokenClassification (PyTorch eager; labels -100 where
                   label_mask is 0, so its CrossEntropyLoss averages the labelled positions
                   alone), the same optimizer and schedule as above, in a worker process.
   The rows are timed like the classifier's, after them (--training_tasks picks the tasks).

3. Feature conversion (run_classifier's data step) on real sentence pairs: consecutive sentences
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

4. extract_features (sequences/s) at each preset: --extract_lines lines of --corpus (each two
   consecutive sentences of a document joined by " ||| ", so pairs), the default four layers
   (-1,-2,-3,-4), --batch_size lines per call, sequence --seq_length, random weights of the
   preset saved as a checkpoint, one device and --threads threads:
     model:  FeatureExtractor alone on the converted features (the encoder's forward pass to
             the deepest asked layer and the copy of the values to NumPy), the best of two
             passes after a warm-up batch;
     jsonl / npz: the whole command (bert_tf.tasks.feature_extraction.extract_features: read,
             tokenize, run, write) to the original's JSON lines and to npz, start to finish.
   No peer: the original writes only JSON through TPUEstimator.predict; the ratios are against
   the model-only rate, i.e. the share of the time the output format costs.

The table goes to benchmarks/results/finetuning_DATE.json (benchmarks/results_file.py). --smoke:
the tiny preset (2 layers of 128), batch 4, sequence 32, one round of one step, 50 pairs
converted once, 8 lines through extract_features, Hugging Face left out; seconds.
"""

import collections
import importlib.util
import os
import sys
import tempfile
import time

from absl import app
from absl import flags

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # pylint: disable=g-import-not-at-top,wrong-import-position
import corpora  # pylint: disable=g-import-not-at-top,wrong-import-position
import peers  # pylint: disable=g-import-not-at-top,wrong-import-position
import results_file  # pylint: disable=g-import-not-at-top,wrong-import-position

flags.DEFINE_list("presets", ["mini", "small"],
                  "Model sizes; configs/bert_config_<preset>.json is used.")
flags.DEFINE_integer("batch_size", 32, "Training examples per step.")
flags.DEFINE_integer("seq_length", 128, "Tokens per example (training and conversion).")
flags.DEFINE_integer("num_labels", 2, "Classes of the classifier.")
flags.DEFINE_list("training_tasks", ["classifier", "tagging"],
                  "Fine-tuning tasks whose training is timed: classifier (sentence pairs), "
                  "tagging (token classification).")
flags.DEFINE_integer("tagging_labels", 9, "Labels of the tagger (CoNLL-2003's 9 IOB tags).")
flags.DEFINE_float("tagging_labelled", 0.7, "Share of the positions between [CLS] and [SEP] "
                   "with label_mask 1 in the tagger's random batches (words' first pieces).")
flags.DEFINE_integer("steps", 4, "Timed training steps per round and system.")
flags.DEFINE_integer("rounds", 3, "Timed rounds (the systems take turns each round); the median "
                     "round counts.")
flags.DEFINE_integer("warmup_steps", 2, "Untimed steps per system before the rounds.")
flags.DEFINE_integer("pool_batches", 8, "Distinct random batches, cycled.")
flags.DEFINE_float("learning_rate", 2e-5, "Peak learning rate (10% warmup, linear decay).")
flags.DEFINE_integer("threads", 1, "TensorFlow intra- and inter-op threads (torch threads).")
flags.DEFINE_list("systems", ["ours", "model_garden", "hf_torch"],
                  "Training systems to measure.")
flags.DEFINE_string("corpus", corpora.path("austen_moby"),
                    "One sentence per line, blank lines between documents.")
flags.DEFINE_string("vocab_file", corpora.VOCAB_FILE, "Uncased vocab.")
flags.DEFINE_integer("conversion_examples", 5000, "Sentence pairs converted.")
flags.DEFINE_integer("conversion_repeats", 3, "Timings per converter (best counts).")
flags.DEFINE_bool("skip_training", False, "Leave out the training rows.")
flags.DEFINE_bool("skip_conversion", False, "Leave out the conversion rows.")
flags.DEFINE_bool("skip_extract_features", False, "Leave out the extract_features rows.")
flags.DEFINE_integer("extract_lines", 256, "Corpus lines (sentence pairs joined by ' ||| ') "
                     "each extract_features row reads.")
flags.DEFINE_string("hf_worker_dir", None, "Internal: run as the Hugging Face worker process.")
results_file.define_flags(flags)
FLAGS = flags.FLAGS

TRAINING_TASKS = ("classifier", "tagging")
GOALS = {"model_garden": 1.2, "hf_torch": 1.15, "original": 10.0}
NAMES = {"ours": "ours (bert_tf loop.Trainer)",
         "model_garden": "Model Garden BertClassifier",
         "hf_torch": "HF BertForSequenceClassification (PyTorch eager)"}
TAGGER_NAMES = {"ours": "ours (bert_tf loop.Trainer, build_tagger_model)",
                "model_garden": "Model Garden BertTokenClassifier",
                "hf_torch": "HF BertForTokenClassification (PyTorch eager)"}


# === Training: data ===


def random_pool(np, vocab_size, num_labels, batches, batch, seq, seed=0):
  """[batches * batch, ...] random examples of the classifier's batch layout (numpy)."""
  n = batches * batch
  rng, lengths, positions, pool = harness.random_inputs(np, vocab_size, n, seq, seq // 4, seed)
  types = (positions >= (lengths // 2)[:, None]).astype(np.int32) * pool["input_mask"]
  return dict(pool, input_type_ids=types,
              label_ids=rng.integers(0, num_labels, size=n).astype(np.int32),
              is_real_example=np.ones(n, np.int32))


def tagger_pool(np, vocab_size, num_labels, labelled, batches, batch, seq, seed=0):
  """[batches * batch, ...] random examples of the tagger's batch layout (numpy): one segment;
  label_mask 1 on a `labelled` share of the positions between [CLS] and [SEP] (at least one),
  label_ids there 0 ("O") for 83% and uniform over the other labels otherwise, 0 elsewhere."""
  n = batches * batch
  rng, lengths, positions, pool = harness.random_inputs(np, vocab_size, n, seq, seq // 4, seed)
  pool["input_word_ids"][np.arange(n), lengths - 1] = 102  # [SEP] last
  inner = (positions >= 1) & (positions < (lengths - 1)[:, None])
  mask = inner & (rng.random((n, seq)) < labelled)
  mask[:, 1] = True  # every example has a labelled word
  tags = np.where(rng.random((n, seq)) < 0.83, 0,
                  rng.integers(1, max(num_labels, 2), size=(n, seq))) % num_labels
  return dict(pool, input_type_ids=np.zeros((n, seq), np.int32),
              label_ids=(tags * mask).astype(np.int32), label_mask=mask.astype(np.int32))


# === Training: systems ===
# Each returns (run(num_steps) that blocks until the steps are done, trainable parameters).


def ours(config, pool, total_steps, warmup):
  from bert_tf.tasks.classifier import head as clf_head  # pylint: disable=g-import-not-at-top
  from bert_tf.tasks.classifier import loss as classifier  # pylint: disable=g-import-not-at-top
  return harness.ours(lambda: clf_head.build_classifier_model(config, FLAGS.num_labels),
                      classifier.TASK, pool, total_steps, warmup, FLAGS)


def model_garden(config, pool, total_steps, warmup):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from official.nlp.modeling import models as mg_models  # pylint: disable=g-import-not-at-top

  def build_head(encoder, initializer):
    return mg_models.BertClassifier(encoder, num_classes=FLAGS.num_labels,
                                    initializer=initializer,
                                    dropout_rate=config.hidden_dropout_prob)

  def losses(logits, batch):  # sentence_prediction's build_losses
    return tf.reduce_mean(harness.sparse_crossentropy(batch["label_ids"], logits))

  def metrics(logits, batch):  # the accuracy count
    return harness.correct_count(logits, batch["label_ids"])
  return harness.model_garden(config, pool, total_steps, warmup, FLAGS, build_head, losses,
                              metrics)


def hf_torch_model(spec, pool):
  """Hugging Face's PyTorch classifier, or with spec["head"] "tagger" its token classifier
  (labels -100 where label_mask is 0), and its run function (in the worker process)."""
  import transformers  # pylint: disable=g-import-not-at-top
  if spec.get("head") == "tagger":
    import numpy as np  # pylint: disable=g-import-not-at-top
    pool = dict(pool, hf_labels=np.where(pool["label_mask"] > 0, pool["label_ids"], -100))
    return harness.hf_torch_model(
        spec, pool, lambda: transformers.BertForTokenClassification(
            peers.hf_bert_config(spec["config"], num_labels=spec["num_labels"])),
        labels={"labels": "hf_labels"})
  return harness.hf_torch_model(
      spec, pool, lambda: transformers.BertForSequenceClassification(
          peers.hf_bert_config(spec["config"], num_labels=spec["num_labels"])),
      labels={"labels": "label_ids"})


def hf_torch(config, pool, total_steps, warmup):
  """Hugging Face's PyTorch classifier in a worker process; (None, reason) without torch."""
  return harness.hf_torch(__file__, "hf_worker_", config, pool, total_steps, warmup, FLAGS,
                          num_labels=FLAGS.num_labels)


SYSTEMS = {"ours": ours, "model_garden": model_garden, "hf_torch": hf_torch}


def ours_tagger(config, pool, total_steps, warmup):
  from bert_tf.tasks.tagging import head as tagging_head  # pylint: disable=g-import-not-at-top
  from bert_tf.tasks.tagging import loss as tagging  # pylint: disable=g-import-not-at-top
  return harness.ours(lambda: tagging_head.build_tagger_model(config, FLAGS.tagging_labels),
                      tagging.TASK, pool, total_steps, warmup, FLAGS)


def model_garden_tagger(config, pool, total_steps, warmup):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from official.nlp.modeling import models as mg_models  # pylint: disable=g-import-not-at-top

  def build_head(encoder, initializer):  # tagging.TaggingTask.build_model
    return mg_models.BertTokenClassifier(
        network=encoder, num_classes=FLAGS.tagging_labels, initializer=initializer,
        dropout_rate=config.hidden_dropout_prob, output="logits", output_encoder_outputs=True)

  def losses(outputs, batch):  # tagging.TaggingTask.build_losses
    labels = tf.where(batch["label_mask"] > 0, batch["label_ids"], -1)  # its records' labels
    mask = tf.greater_equal(labels, 0)  # _masked_labels_and_weights
    masked_labels, weights = tf.where(mask, labels, 0), tf.cast(mask, tf.float32)
    loss = harness.sparse_crossentropy(masked_labels, outputs["logits"])
    return tf.math.divide_no_nan(tf.reduce_sum(loss * weights), tf.reduce_sum(weights))

  def metrics(outputs, batch):  # the tagging task has no training metrics
    del outputs, batch
    return tf.constant(0.0)
  return harness.model_garden(config, pool, total_steps, warmup, FLAGS, build_head, losses,
                              metrics)


def hf_torch_tagger(config, pool, total_steps, warmup):
  """Hugging Face's PyTorch tagger in a worker process; (None, reason) without torch."""
  return harness.hf_torch(__file__, "hf_tagger_worker_", config, pool, total_steps, warmup,
                          FLAGS, num_labels=FLAGS.tagging_labels, head="tagger")


TAGGER_SYSTEMS = {"ours": ours_tagger, "model_garden": model_garden_tagger,
                  "hf_torch": hf_torch_tagger}


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
  from bert_tf import record_schema  # pylint: disable=g-import-not-at-top
  from bert_tf import tokenization  # pylint: disable=g-import-not-at-top
  # pylint: disable-next=g-import-not-at-top
  from bert_tf.tasks.classifier import data as classifier_data
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
          # Cold, as a process's first conversion: no word cache, no varint table.
          record_schema.varint_table.cache_clear()
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


def conversion_rows():
  """The conversion's table rows (what, system, examples/s text, ratio text, goal text)."""
  print("conversion", flush=True)
  seconds, count = measure_conversion()
  ratio = seconds["original"] / seconds["ours"]
  what = f"conversion, {count} pairs"
  return [(what, "ours (file_based_convert_examples_to_features)",
           f"{count / seconds['ours']:,.0f}", "", ""),
          (what, "original-equivalent (naive tokenizer, tf.train.Example)",
           f"{count / seconds['original']:,.0f}", f"{ratio:.1f}x",
           harness.goal_text(ratio, GOALS["original"]))]


# === extract_features ===


def extract_features_rows():
  """Sequences/s of extract_features per preset: the model alone, and the whole command to
  JSONL and to npz (table rows as the others)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from bert_tf import tokenization  # pylint: disable=g-import-not-at-top
  from bert_tf.config import BertConfig  # pylint: disable=g-import-not-at-top
  from bert_tf.model import checkpoints  # pylint: disable=g-import-not-at-top
  from bert_tf.model.encoder import build_encoder  # pylint: disable=g-import-not-at-top
  # pylint: disable-next=g-import-not-at-top
  from bert_tf.tasks.features import extractor as fe_extractor
  from bert_tf.tasks.features import inputs as fe_inputs  # pylint: disable=g-import-not-at-top
  from bert_tf.tasks.features import run as fe_run  # pylint: disable=g-import-not-at-top
  from bert_tf.tasks.features import settings as fe_settings  # pylint: disable=g-import-not-at-top
  tf.config.threading.set_intra_op_parallelism_threads(FLAGS.threads)
  pairs = read_pairs(FLAGS.corpus, FLAGS.extract_lines)
  rows = []
  with tempfile.TemporaryDirectory() as tmp:
    input_file = os.path.join(tmp, "input.txt")
    with open(input_file, "w", encoding="utf-8") as f:
      f.write("".join(f"{a} ||| {b}\n" for _, a, b, _ in pairs))
    tokenizer = tokenization.FullTokenizer(FLAGS.vocab_file, do_lower_case=True)
    for preset in FLAGS.presets:
      print(f"extract_features {preset}", flush=True)
      config = BertConfig.from_json_file(
          os.path.join(REPO_ROOT, "configs", f"bert_config_{preset}.json"))
      encoder = build_encoder(config)
      prefix = os.path.join(tmp, preset, "bert_model.ckpt")
      checkpoints.save_tf1_checkpoint(encoder, prefix)
      config.to_json_file(os.path.join(tmp, preset, "bert_config.json"))
      features = list(fe_inputs.convert_examples_to_features(
          fe_inputs.read_examples(input_file), FLAGS.seq_length, tokenizer))
      # The default four layers; fewer on a model that has fewer (--smoke's tiny preset).
      layers = ",".join(str(-i) for i in range(1, min(4, config.num_hidden_layers) + 1))
      extractor = fe_extractor.FeatureExtractor(
          encoder, fe_settings.parse_layers(layers, config.num_hidden_layers))
      size = FLAGS.batch_size
      extractor.run_features(features[:size], size)  # warm-up (tracing)
      best = float("inf")
      for _ in range(2):
        start = time.perf_counter()
        for i in range(0, len(features), size):
          extractor.run_features(features[i:i + size], size)
        best = min(best, time.perf_counter() - start)
      model_rate = len(features) / best
      what = f"extract_features {preset}, {len(features)} lines"
      rows.append((what, "model only (FeatureExtractor)", f"{model_rate:.2f}", "", ""))
      for output_format in ("npz", "jsonl"):
        settings = fe_settings.ExtractFeaturesSettings(
            input_file=input_file, output_file=os.path.join(tmp, preset, f"out.{output_format}"),
            vocab_file=FLAGS.vocab_file, init_checkpoint=prefix,
            max_seq_length=FLAGS.seq_length, batch_size=size, output_format=output_format,
            layers=layers)
        start = time.perf_counter()
        fe_run.extract_features(settings, config)
        rate = len(features) / (time.perf_counter() - start)
        size_mb = os.path.getsize(settings.output_file) / 1e6
        rows.append((what, f"whole command, {output_format} ({size_mb:,.0f} MB)",
                     f"{rate:.2f}", f"{rate / model_rate:.2f}x of the model's rate", ""))
  return rows


# === Main ===


def main():
  import numpy as np  # pylint: disable=g-import-not-at-top
  if FLAGS.smoke:
    harness.apply_smoke(FLAGS)
    FLAGS.conversion_examples, FLAGS.conversion_repeats, FLAGS.extract_lines = 50, 1, 8
  unknown = sorted(set(FLAGS.training_tasks) - set(TRAINING_TASKS))
  if unknown:
    raise app.UsageError(f"unknown training task(s) {', '.join(unknown)}; choose from "
                         f"{', '.join(TRAINING_TASKS)}")
  rows = [] if FLAGS.skip_conversion else conversion_rows()
  tasks = [] if FLAGS.skip_training else FLAGS.training_tasks
  if "classifier" in tasks:
    rows.extend(harness.training_rows(
        FLAGS, lambda config: random_pool(np, config.vocab_size, FLAGS.num_labels,
                                          FLAGS.pool_batches, FLAGS.batch_size,
                                          FLAGS.seq_length),
        SYSTEMS, NAMES, GOALS, lambda preset: f"fine-tune {preset}"))
  if "tagging" in tasks:
    rows.extend(harness.training_rows(
        FLAGS, lambda config: tagger_pool(np, config.vocab_size, FLAGS.tagging_labels,
                                          FLAGS.tagging_labelled, FLAGS.pool_batches,
                                          FLAGS.batch_size, FLAGS.seq_length),
        TAGGER_SYSTEMS, TAGGER_NAMES, GOALS, lambda preset: f"tagging {preset}"))

  labels = f"{FLAGS.num_labels} labels, "
  if "tagging" in tasks:
    labels = ((f"classifier {labels}" if "classifier" in tasks else "") +
              f"tagger {FLAGS.tagging_labels} labels ({FLAGS.tagging_labelled:.0%} of the "
              f"positions between [CLS] and [SEP] labelled), ")
  if not FLAGS.skip_extract_features:
    rows.extend(extract_features_rows())
  settings_text = (harness.rounds_text(FLAGS, labels) +
                   f", conversion best of {FLAGS.conversion_repeats}")
  harness.print_table(settings_text, "ours / this", rows)
  results_file.write("finetuning", harness.table_results(settings_text, rows), FLAGS.smoke,
                     FLAGS.results_file)


if __name__ == "__main__":
  harness.run(main, FLAGS, hf_torch_model)
