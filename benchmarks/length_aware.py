"""Length-aware and packed batches (issues 27 and 37): fine-tuning and serving speed on
realistic length distributions, ours with packed rows (exact, static) and with batches cut to
length buckets against ours at fixed length, Hugging Face (dynamic padding, group_by_length)
and Model Garden (fixed length). Each system prints real tokens as a share of the positions it
computes (and the packed ones their number of batch shapes).

  python benchmarks/length_aware.py --threads=1

Data: --examples (1600) real texts of --corpora (one sentence per line, blank lines between
documents), tokenized with --vocab_file by bert_tf.tokenization.FullTokenizer, chosen so their
WordPiece lengths resemble the tasks' (the mean, p50 and p90 are printed):
  short    single sentences of 13-54 text WordPieces, drawn at random from the corpora in turn
           (held-out movie-review sentences: mean 27, p90 42);
  pairs    consecutive sentences of one document, each of 10-60 WordPieces (MRPC-like pairs:
           about 60 with [CLS] and two [SEP]);
  tagging  sentences of 3-36 WordPieces split on spaces into words, with synthetic IOB tags
           (83% O) of --tagging_labels labels (CoNLL sentences: about 20 WordPieces);
  squad    training windows at --max_seq_length (384), --doc_stride, --max_query_length of a
           SQuAD 2.0 file built from the corpora by squad.py's squad_from_corpora (contexts of
           120-400 words, a third of the questions unanswerable).
Our records are written by the library's converters (classifier_data.
file_based_convert_examples_to_features, tagging_data.convert_sentences_to_features,
squad_data.convert_examples_to_features) and read by input_pipeline's dataset functions
(record_dataset with each task's record_spec) with shuffle_buffer_size=1, i.e. in file
order, or with group_by_length=True (the file shuffled, windows of 50 batches ordered by
length bucket with a random order within a bucket, the batches shuffled; seed 0). The batches every system runs are those datasets' batches read without
length buckets (checked against the bucketed ones: the same rows, cut to the bucket of their
longest row), so every system sees the same examples in the same batches in the same order.

Systems (--systems), trained with batch --batch_size, max length --seq_length (--max_seq_length
for squad), the MiniLM-L6 sizes (L6, H384, A12, I1536, vocabulary 30522; random weights) unless
--bert_config_file, one device and --threads threads:
  ours_packed   packed rows, exact (input_pipeline.Packing(EXACT); rows narrowed to the fixed
                'auto' ladder when no row is added), the packed model (the builder of the
                task's head.py with packed=True);
  ours_static   packed rows, static: row_packing.static_rows rows a step fitted to the file;
                its examples/s count the real examples of each round (they vary per step);
  ours          the task's head.py builder, trained by loop.Trainer with the task's TASK
                (harness.ours),
                batches in file order cut to --length_buckets (auto: fitted to the
                file's lengths for batches of --batch_size, as the commands fit their
                training files; input_pipeline.fitted_buckets);
  ours_fixed    the same at fixed length (--length_buckets=none, today's behaviour);
  ours_grouped  length buckets (auto: the fixed ladder, as the commands use for grouped
                batches) and group_by_length=True;
  hf_dynamic    transformers' BertFor* (PyTorch eager, harness.hf_torch_model's AdamW, schedule
                and clipping) in a worker process, every batch cut to its longest row as
                DataCollatorWithPadding pads (file order);
  hf_grouped    the same on ours_grouped's batches (group_by_length's idea) with dynamic
                padding;
  hf_fixed      (not by default) Hugging Face padded to max length;
  model_garden  finetuning.py's / squad.py's Model Garden networks at fixed length, as its
                tasks' data loaders pad.
After --warmup_steps untimed steps each, the systems take turns for --rounds rounds of --steps
steps (--squad_warmup_steps and --squad_steps for squad); each round's examples/s counts, and the
ratios are taken round by round (ours' round r / the peer's round r, the same batches): the
tables give the median and min-max over rounds.

Real-token FLOP rate: matmul FLOPs of forward and backward (3x the forward pass, peers.
model_flops of the full model) of each example at its real length only (padding not counted),
over the round's time, against peers.matmul_peak_gflops measured in the same process at the same
thread count. Our classifier computes only the [CLS] row in its last layer, so its rate is an
effective one (it can do less work than counted).

Serving (--skip_serving to leave out): the classifier exported twice by
tasks/classifier/serving_module.export_classifier_model (length_buckets "auto" and "none"; the
same random weights), both SavedModels loaded; on the short sentences, batch-1 latency (median over --serving_requests
requests) and batch-32 throughput (--serving_batches batches), the two exports taking turns for
--serving_rounds rounds; ratios round by round.

The shared knobs (--batch_size, --seq_length, --num_labels, --tagging_labels, --steps, --rounds,
--warmup_steps, --learning_rate, --threads, --systems, --vocab_file, --corpora, --questions,
--max_seq_length, --doc_stride, --max_query_length and the internal --hf_worker_dir) are
finetuning.py's and squad.py's flags (this script imports squad for squad_from_corpora and both
for their Model Garden pieces); the timing rounds are harness.measure_training's.

The tables go to benchmarks/results/length_aware_DATE.json (benchmarks/results_file.py),
rewritten after each task ("complete": false until the run ends), so a run cut short keeps the
tasks it finished. squad runs only the systems of --squad_systems (memory: see its help).
--smoke: configs/bert_config_tiny.json, the short sentences only (64 examples, batch 8), one
warm-up step and one round of one step, Hugging Face left out, and the serving rows left out
(their two SavedModel exports take most of a minute; --smoke --noskip_serving keeps them, with
4 requests and one batch in one round).
"""

import os
import random
import statistics
import sys
import tempfile
import time
import types

from absl import app
from absl import flags

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import finetuning  # pylint: disable=g-import-not-at-top,wrong-import-position
import harness  # pylint: disable=g-import-not-at-top,wrong-import-position
import peers  # pylint: disable=g-import-not-at-top,wrong-import-position
import squad  # pylint: disable=g-import-not-at-top,wrong-import-position

TASKS = ("short", "pairs", "tagging", "squad")
SYSTEMS = ("ours", "ours_packed", "ours_static", "ours_fixed", "ours_grouped", "hf_dynamic",
           "hf_grouped", "hf_fixed", "model_garden")
flags.DEFINE_list("length_tasks", list(TASKS), "Training distributions to time: "
                  + ", ".join(TASKS) + ".")
flags.DEFINE_integer("examples", 1600, "Examples of each distribution (records written).")
flags.DEFINE_integer("squad_steps", 1, "Timed steps per round for squad (384-long windows).")
flags.DEFINE_integer("squad_warmup_steps", 1, "Untimed steps per system for squad.")
flags.DEFINE_list("squad_systems", ["ours_packed", "ours_static", "ours", "hf_dynamic"],
                  "The systems of --systems that also run squad. Every system's model, optimizer "
                  "and compiled steps stay in memory while the systems take turns, and at 384 "
                  "positions all of the default systems together need more than 23 GB.")
flags.DEFINE_string("length_buckets", "auto", "Our buckets (bert_tf.length_buckets.parse).")
flags.DEFINE_string("bert_config_file", "", "Model sizes; default MiniLM-L6 (L6 H384 A12 I1536).")
flags.DEFINE_bool("skip_serving", False, "Leave out the serving rows.")
flags.DEFINE_integer("serving_requests", 100, "Batch-1 requests per round and export.")
flags.DEFINE_integer("serving_batches", 5, "Batch-32 requests per round and export.")
flags.DEFINE_integer("serving_rounds", 5, "Serving rounds (the exports take turns).")
flags.DEFINE_integer("data_seed", 0, "Seed of the text selection.")
FLAGS = flags.FLAGS
FLAGS.set_default("systems", ["ours_packed", "ours_static", "ours", "ours_fixed", "hf_dynamic",
                              "model_garden"])
FLAGS.set_default("steps", 5)
FLAGS.set_default("rounds", 3)
# A width's first step compiles the fused kernels for it: 8 warm-up steps meet most of a task's
# bucket widths, so that few compiles land in the timed rounds (benchmarks/README.md).
FLAGS.set_default("warmup_steps", 8)

NAMES = {"ours": "ours, length buckets",
         "ours_packed": "ours, packed rows (exact) + length buckets",
         "ours_static": "ours, packed rows (static: one shape)",
         "ours_fixed": "ours, fixed length",
         "ours_grouped": "ours, length buckets + group_by_length",
         "hf_dynamic": "HF PyTorch, dynamic padding",
         "hf_grouped": "HF PyTorch, group_by_length + dynamic padding",
         "hf_fixed": "HF PyTorch, padded to max length",
         "model_garden": "Model Garden, fixed length"}
# Which of ours each peer is compared with (ours / peer, round by round; ours_grouped / ours).
AGAINST = {"ours": "ours_packed", "ours_fixed": "ours_static", "ours_grouped": "ours",
           "hf_dynamic": "ours_packed", "hf_grouped": "ours_grouped",
           "hf_fixed": "ours_packed", "model_garden": "ours_packed"}
# Issue 37's goals: packed (exact) against the bucketed default and Hugging Face; static
# packing (one shape) against our fixed length (what a TPU runs without packing).
GOALS = {"short": {"ours": 1.5, "hf_dynamic": 2.2, "ours_fixed": 3.5},
         "pairs": {}, "tagging": {"hf_dynamic": 1.8},
         "squad": {"hf_dynamic": 2.2}}
SERVING_LATENCY_GOAL = 3.0
REAL_FLOP_GOAL = 0.75
REAL_TOKEN_GOAL = 0.9
# Text WordPiece ranges of the selections (see the module docstring).
SHORT_RANGE = (13, 54)
PAIR_RANGE = (10, 60)
TAGGING_RANGE = (3, 36)
ENTITY_TYPES = ("PER", "ORG", "LOC", "MISC")


# === Data ===


def corpus_documents(paths):
  """{path: documents (lists of lines)} of the corpora that exist."""
  return {path: squad.read_documents(path) for path in paths if os.path.exists(path)}


def shuffled_lines(documents, rng):
  """(document index, line index) of every line of a corpus, in random order."""
  places = [(d, i) for d, lines in enumerate(documents) for i in range(len(lines))]
  rng.shuffle(places)
  return places


def select_texts(corpora, tokenizer, count, pieces_range, rng, pair):
  """`count` texts (or (text, next text of the document) pairs) whose WordPiece counts are all
  within pieces_range, drawn at random from the corpora in turn."""
  lo, hi = pieces_range
  streams = [(documents, iter(shuffled_lines(documents, rng)))
             for documents in corpora.values()]
  chosen = []
  while len(chosen) < count and streams:
    for stream in list(streams):
      documents, places = stream
      for d, i in places:
        lines = documents[d]
        if pair and i + 1 >= len(lines):
          continue
        texts = (lines[i], lines[i + 1]) if pair else (lines[i],)
        if all(lo <= len(tokenizer.tokenize(t)) <= hi for t in texts):
          chosen.append(texts if pair else texts[0])
          break
      else:
        streams.remove(stream)
      if len(chosen) == count:
        break
  if len(chosen) < count:
    raise app.UsageError(f"--corpora hold only {len(chosen)} texts of {lo}-{hi} WordPieces; "
                         f"--examples={count}")
  return chosen


def synthetic_tags(words, rng):
  """IOB tags: O for 83% of the words, else an entity of a random type, continued (I-) with
  probability 1/2 after an entity word."""
  tags = []
  for _ in words:
    previous = tags[-1] if tags else "O"
    if previous != "O" and rng.random() < 0.5:
      tags.append("I-" + previous[2:])
    elif rng.random() < 0.83:
      tags.append("O")
    else:
      tags.append("B-" + rng.choice(ENTITY_TYPES))
  return tags


def write_records(task, corpora, tokenizer, directory, rng):
  """Writes the task's --examples records with the library's converter; returns (path, max
  length, a description)."""
  # pylint: disable-next=g-import-not-at-top
  from bert_tf.tasks.classifier import data as classifier_data
  from bert_tf.tasks.squad import data as squad_data  # pylint: disable=g-import-not-at-top
  from bert_tf.tasks.tagging import data as tagging_data  # pylint: disable=g-import-not-at-top
  path = os.path.join(directory, f"{task}.tf_record")
  n, seq = FLAGS.examples, FLAGS.seq_length
  labels = [str(i) for i in range(FLAGS.num_labels)]
  if task in ("short", "pairs"):
    texts = select_texts(corpora, tokenizer, n, SHORT_RANGE if task == "short" else PAIR_RANGE,
                         rng, pair=task == "pairs")
    examples = [classifier_data.InputExample(
        guid=f"{task}-{i}", text_a=t[0] if task == "pairs" else t,
        text_b=t[1] if task == "pairs" else None, label=labels[rng.randrange(len(labels))])
                for i, t in enumerate(texts)]
    classifier_data.file_based_convert_examples_to_features(examples, labels, seq, tokenizer,
                                                            path)
    what = (f"single sentences of {SHORT_RANGE[0]}-{SHORT_RANGE[1]} WordPieces" if task == "short"
            else f"consecutive sentence pairs, each {PAIR_RANGE[0]}-{PAIR_RANGE[1]} WordPieces")
    return path, seq, what
  if task == "tagging":
    texts = select_texts(corpora, tokenizer, n, TAGGING_RANGE, rng, pair=False)
    sentences = []
    for i, text in enumerate(texts):
      words = tuple(text.split())
      sentences.append(tagging_data.Sentence(words=words, tags=tuple(synthetic_tags(words, rng)),
                                             document=0, line=i + 1))
    tags = ["O"] + [f"{p}-{t}" for t in ENTITY_TYPES for p in ("B", "I")]
    label_map = {tag: i % FLAGS.tagging_labels for i, tag in enumerate(tags)}
    with tagging_data.FeatureWriter(path) as writer:
      tagging_data.convert_sentences_to_features(sentences, label_map, seq, tokenizer, writer)
    return path, seq, (f"sentences of {TAGGING_RANGE[0]}-{TAGGING_RANGE[1]} WordPieces as words, "
                       f"synthetic IOB tags")
  # squad
  seq = FLAGS.max_seq_length
  train, _ = squad.squad_from_corpora(list(corpora), max(FLAGS.questions, n))
  json_file = os.path.join(directory, "squad_train.json")
  import json  # pylint: disable=g-import-not-at-top
  with open(json_file, "w", encoding="utf-8") as f:
    json.dump(train, f)
  examples = squad_data.read_squad_examples(json_file, True, True)
  written = [0]
  with squad_data.FeatureWriter(path, is_training=True) as writer:

    def keep_first(feature):
      if written[0] < n:
        writer.process_feature(feature)
        written[0] += 1
    squad_data.convert_examples_to_features(examples, tokenizer, seq, FLAGS.doc_stride,
                                            FLAGS.max_query_length, True, keep_first)
  if written[0] < n:
    raise app.UsageError(f"the SQuAD file gave {written[0]} windows; --examples={n} "
                         "(raise --questions)")
  return path, seq, (f"SQuAD 2.0 training windows (doc_stride {FLAGS.doc_stride}, "
                     f"max_query_length {FLAGS.max_query_length})")


def dataset_function(task, path, seq, buckets, grouped, packing=None):
  """input_pipeline's training dataset of the task's records (file order: shuffle buffer 1),
  as a tf.distribute dataset function."""
  # pylint: disable-next=g-import-not-at-top
  from bert_tf.tasks.classifier import data as classifier_data
  from bert_tf.tasks.squad import data as squad_data  # pylint: disable=g-import-not-at-top
  from bert_tf.tasks.tagging import data as tagging_data  # pylint: disable=g-import-not-at-top
  from bert_tf.training import input_pipeline  # pylint: disable=g-import-not-at-top
  spec = input_pipeline.parsing_spec(
      {"short": lambda: classifier_data.record_spec(seq),
       "pairs": lambda: classifier_data.record_spec(seq),
       "tagging": lambda: tagging_data.record_spec(seq),
       "squad": lambda: squad_data.record_spec(seq, is_training=True)}[task]())

  def make(ctx):
    return input_pipeline.record_dataset(
        path, spec, FLAGS.batch_size, True, input_context=ctx, seed=0, shuffle_buffer_size=1,
        length_buckets=buckets, group_by_length=grouped, packing=packing)
  return make


def packings(path, seq):
  """{system: packed_rows.Packing} of the packed systems, as the commands choose them:
  exact, and static with row_packing.static_rows fitted to the file."""
  from bert_tf import row_packing  # pylint: disable=g-import-not-at-top
  from bert_tf.training import bucketing, packed_rows  # pylint: disable=g-import-not-at-top
  rows = row_packing.static_rows(bucketing.length_counts(path, seq), FLAGS.batch_size, seq)
  return {"ours_packed": packed_rows.Packing(row_packing.EXACT),
          "ours_static": packed_rows.Packing(row_packing.STATIC, rows=rows)}


def packed_shares(task, path, seq, buckets, packing, num_batches):
  """(real positions / computed positions, distinct batch shapes) of the first num_batches
  packed batches."""
  real = computed = 0
  shapes = set()
  for batch in dataset_function(task, path, seq, buckets, False, packing)(None).take(
      num_batches):
    mask = batch["input_mask"].numpy()
    real += int((mask > 0).sum())
    computed += mask.size
    shapes.add(mask.shape)
  return real / max(computed, 1), len(shapes)


def real_lengths(np, mask):
  """One past the last real position of each row of mask [n, L]."""
  positions = np.arange(1, mask.shape[1] + 1)
  return (mask * positions).max(axis=1)


def batch_pool(np, task, path, seq, grouped, num_batches, buckets):
  """The first num_batches batches of the dataset without length buckets, as one numpy dict
  [num_batches * batch, ...]; checks that the bucketed dataset gives the same rows cut to
  the bucket of each batch's longest row."""
  from bert_tf import length_buckets  # pylint: disable=g-import-not-at-top
  full = dataset_function(task, path, seq, None, grouped)(None).take(num_batches)
  cut = dataset_function(task, path, seq, buckets, grouped)(None).take(num_batches)
  batches = []
  for a, b in zip(full, cut):
    a = {k: v.numpy() for k, v in a.items()}
    width = length_buckets.bucket_for(int(real_lengths(np, a["input_mask"]).max()), buckets)
    for key, value in b.items():
      expected = a[key][:, :width] if a[key].ndim == 2 and a[key].shape[1] == seq else a[key]
      if not np.array_equal(value.numpy(), expected):
        raise AssertionError(f"{task}: bucketed batch {len(batches)} differs in {key}")
    batches.append(a)
  if len(batches) < num_batches:
    raise AssertionError(f"{task}: only {len(batches)} batches")
  return {key: np.concatenate([b[key] for b in batches]) for key in batches[0]}


def length_text(np, lengths):
  return (f"mean {np.mean(lengths):.1f}, p50 {np.median(lengths):.0f}, "
          f"p90 {np.percentile(lengths, 90):.0f}, max {np.max(lengths)}")


# === Systems ===


def model_config():
  from bert_tf.config import BertConfig  # pylint: disable=g-import-not-at-top
  if FLAGS.bert_config_file:
    return BertConfig.from_json_file(FLAGS.bert_config_file)
  return BertConfig(vocab_size=30522, hidden_size=384, num_hidden_layers=6,
                    num_attention_heads=12, intermediate_size=1536)


def build_ours(task, config, packed=False):
  from bert_tf.tasks.classifier import head as clf_head  # pylint: disable=g-import-not-at-top
  from bert_tf.tasks.squad import head as squad_head  # pylint: disable=g-import-not-at-top
  from bert_tf.tasks.tagging import head as tagging_head  # pylint: disable=g-import-not-at-top
  from bert_tf.tasks.classifier import loss as classifier  # pylint: disable=g-import-not-at-top
  from bert_tf.tasks.squad import loss as squad_task  # pylint: disable=g-import-not-at-top
  from bert_tf.tasks.tagging import loss as tagging  # pylint: disable=g-import-not-at-top
  if task in ("short", "pairs"):
    return (lambda: clf_head.build_classifier_model(config, FLAGS.num_labels, packed=packed),
            classifier.TASK)
  if task == "tagging":
    return (lambda: tagging_head.build_tagger_model(config, FLAGS.tagging_labels, packed=packed),
            tagging.TASK)
  return lambda: squad_head.build_span_model(config, packed=packed), squad_task.TASK


def task_systems(task, path, seq, buckets, pools, settings, fitted):
  """{system: fn(config, pool, total_steps, warmup) -> (run, parameters)} of the task; pools
  are the file-order and grouped batches (numpy) the peers run."""

  def ours_system(lengths, grouped, packing=None):
    def build(config, pool, total_steps, warmup):
      del pool
      build_model, task_module = build_ours(task, config, packed=packing is not None)
      return harness.ours(build_model, task_module, None, total_steps, warmup, settings,
                          make_dataset=dataset_function(task, path, seq, lengths, grouped,
                                                        packing))
    return build

  def hf_system(grouped, dynamic):
    def build(config, pool, total_steps, warmup):
      del pool
      head = {"short": "classifier", "pairs": "classifier", "tagging": "tagger",
              "squad": "span"}[task]
      return harness.hf_torch(__file__, f"hf_{task}_worker_", config,
                              pools["grouped" if grouped else "file"], total_steps, warmup,
                              settings, head=head, dynamic_padding=dynamic,
                              num_labels=FLAGS.tagging_labels if task == "tagging"
                              else FLAGS.num_labels)
    return build

  def model_garden_system(config, pool, total_steps, warmup):
    del pool
    build = {"short": finetuning.model_garden, "pairs": finetuning.model_garden,
             "tagging": finetuning.model_garden_tagger, "squad": squad.model_garden}[task]
    return build(config, pools["file"], total_steps, warmup)

  packed = packings(path, seq)
  return {"ours": ours_system(fitted, False), "ours_fixed": ours_system(None, False),
          "ours_packed": ours_system(buckets, False, packed["ours_packed"]),
          "ours_static": ours_system(None, False, packed["ours_static"]),
          "ours_grouped": ours_system(buckets, True),
          "hf_dynamic": hf_system(False, True), "hf_grouped": hf_system(True, True),
          "hf_fixed": hf_system(False, False), "model_garden": model_garden_system}


def hf_model(spec, pool):
  """In the Hugging Face worker: the task's transformers model and its run function."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  head = spec["head"]
  if head == "span":
    config = peers.hf_bert_config(spec["config"])
    build, labels = transformers.BertForQuestionAnswering, {
        "start_positions": "start_positions", "end_positions": "end_positions"}
  elif head == "tagger":
    config = peers.hf_bert_config(spec["config"], num_labels=spec["num_labels"])
    pool = dict(pool, hf_labels=np.where(pool["label_mask"] > 0, pool["label_ids"], -100))
    build, labels = transformers.BertForTokenClassification, {"labels": "hf_labels"}
  else:
    config = peers.hf_bert_config(spec["config"], num_labels=spec["num_labels"])
    build, labels = transformers.BertForSequenceClassification, {"labels": "label_ids"}
  return harness.hf_torch_model(spec, pool, lambda: build(config), labels,
                                dynamic_padding=spec["dynamic_padding"])


# === Measurement ===


def spread(values, digits=2):
  return (f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-"
          f"{max(values):.{digits}f})")


def training_rows(np, task, config, corpora, tokenizer, directory, peak):
  """The task's table rows: (task, system, examples/s, ratio, goal, real-token GFLOP/s)."""
  from bert_tf import length_buckets  # pylint: disable=g-import-not-at-top
  from bert_tf.training import bucketing  # pylint: disable=g-import-not-at-top
  rng = random.Random(f"{FLAGS.data_seed}-{task}")
  path, seq, what = write_records(task, corpora, tokenizer, directory, rng)
  buckets = length_buckets.parse(FLAGS.length_buckets, seq)
  # What the commands cut their (ungrouped) training batches to: 'auto' fitted to the file.
  fitted = (bucketing.fitted_buckets(path, seq, FLAGS.batch_size)
            if FLAGS.length_buckets.strip().lower() == length_buckets.AUTO else buckets)
  print(f"{task}: length buckets {','.join(map(str, fitted))} (file order, fitted), "
        f"{','.join(map(str, buckets))} (grouped)", flush=True)
  steps = FLAGS.squad_steps if task == "squad" else FLAGS.steps
  warmup_steps = FLAGS.squad_warmup_steps if task == "squad" else FLAGS.warmup_steps
  timed = ([s for s in FLAGS.systems if s in FLAGS.squad_systems] if task == "squad"
           else FLAGS.systems)
  if len(timed) < len(FLAGS.systems):
    print(f"{task}: left out by --squad_systems: "
          f"{', '.join(s for s in FLAGS.systems if s not in timed)}", flush=True)
  settings = types.SimpleNamespace(
      systems=timed, warmup_steps=warmup_steps, steps=steps,
      rounds=FLAGS.rounds, batch_size=FLAGS.batch_size, learning_rate=FLAGS.learning_rate,
      threads=FLAGS.threads)
  total = warmup_steps + steps * FLAGS.rounds
  pools = {"file": batch_pool(np, task, path, seq, False, total, fitted),
           "grouped": batch_pool(np, task, path, seq, True, total, buckets)}
  b = FLAGS.batch_size
  lengths = {k: real_lengths(np, v["input_mask"]) for k, v in pools.items()}
  all_lengths = lengths["file"]
  widths = {k: [int(length_buckets.bucket_for(int(v[i:i + b].max()),
                                              fitted if k == "file" else buckets))
                for i in range(0, len(v), b)] for k, v in lengths.items()}
  print(f"{task}: {what}; real lengths with [CLS]/[SEP] of the timed file-order batches: "
        f"{length_text(np, all_lengths)}; bucket widths: "
        f"file order mean {np.mean(widths['file']):.0f}, grouped mean "
        f"{np.mean(widths['grouped']):.0f} (of {seq})", flush=True)
  names = {s: NAMES[s] for s in SYSTEMS}
  systems = task_systems(task, path, seq, buckets, pools, settings, fitted)
  rates, skipped = harness.measure_training(config, None, systems, names, settings)

  def real_gflops(system, r):
    # FLOPs per example at its real length (the pool's mean for the round), times the examples
    # per second: static packing's steps hold other numbers of examples than the pool's.
    pool = "grouped" if system in ("ours_grouped", "hf_grouped") else "file"
    first = (warmup_steps + r * steps) * b
    flops = 3 * sum(peers.model_flops(config, int(n), 0)
                    for n in lengths[pool][first:first + steps * b]) / (steps * b)
    return flops * rates[system][r] / 1e9

  shares = {}
  packed = packings(path, seq)
  for system in ("ours_packed", "ours_static"):
    if system in timed:
      shares[system] = packed_shares(task, path, seq, buckets if system == "ours_packed"
                                     else None, packed[system], total)
  computed = {"ours": np.mean(widths["file"]), "ours_fixed": seq}
  for system, width in computed.items():
    shares[system] = (float(np.mean(all_lengths)) / float(width), None)
  for system, (share, shapes) in shares.items():
    print(f"{task}: {NAMES[system]}: real tokens {share:.0%} of computed positions"
          + (f", {shapes} batch shape(s)" if shapes is not None else ""), flush=True)

  rows = []
  label = f"{task} (mean {np.mean(all_lengths):.0f} of {seq})"
  for system in timed:
    if system in skipped:
      rows.append((label, NAMES[system], f"skipped: {skipped[system]}", "", "", ""))
      continue
    gflops = [real_gflops(system, r) for r in range(FLAGS.rounds)]
    flop_text = f"{spread(gflops, 1)}, {statistics.median(gflops) / peak:.0%} of peak"
    if system in shares:
      flop_text += f"; real tokens {shares[system][0]:.0%} of positions" + (
          f", {shares[system][1]} shapes" if shares[system][1] is not None else "")
    ratio_text, goal_text = "", ""
    reference = AGAINST.get(system)
    if reference in rates and system in ("ours_grouped",):  # what the grouping adds
      ratios = [a / c for a, c in zip(rates[system], rates[reference])]
      ratio_text = f"this / {reference}: {spread(ratios)}"
    elif reference in rates:
      ratios = [a / c for a, c in zip(rates[reference], rates[system])]
      ratio_text = f"{reference} / this: {spread(ratios)}"
      goal = GOALS.get(task, {}).get(system)
      if goal:
        goal_text = harness.goal_text(statistics.median(ratios), goal) + (
            "" if min(ratios) >= goal or statistics.median(ratios) < goal
            else " (median; not every round)")
    elif reference:
      ratio_text = f"({reference} not run)"
    if task == "short" and system == "ours_packed":
      share = statistics.median(gflops) / peak
      goal_text = f"real-token FLOPs >= {REAL_FLOP_GOAL:.0%} of peak: " + (
          "met" if share >= REAL_FLOP_GOAL else "NOT met")
    if task in ("short", "tagging") and system == "ours_packed" and system in shares:
      goal_text += ("; " if goal_text else "") + f"real tokens >= {REAL_TOKEN_GOAL:.0%}: " + (
          "met" if shares[system][0] >= REAL_TOKEN_GOAL else "NOT met")
    rows.append((label, NAMES[system], spread(rates[system]), ratio_text, goal_text,
                 flop_text))
  return rows


def serving_rows(np, tf, config, texts, directory):
  """Batch-1 latency and batch-32 throughput of the exports with and without length buckets,
  on `texts`: rows (export, latency ms, ratio, texts/s, ratio, goal)."""
  import keras  # pylint: disable=g-import-not-at-top
  from bert_tf.tasks.classifier import head as clf_head  # pylint: disable=g-import-not-at-top
  from bert_tf.tasks.classifier import serving_module  # pylint: disable=g-import-not-at-top
  keras.utils.set_random_seed(0)
  model = clf_head.build_classifier_model(config, FLAGS.num_labels)
  labels = [str(i) for i in range(FLAGS.num_labels)]
  exports = {}
  for buckets in ("auto", "none"):
    path = serving_module.export_classifier_model(
        model, config, FLAGS.vocab_file, os.path.join(directory, "exports"), labels, pair=False,
        seq_length=FLAGS.seq_length, warmup=False, length_buckets=buckets,
        model_name=f"classifier_{buckets}")
    exports[buckets] = tf.saved_model.load(path).signatures["serving_default"]

  def call(name):
    fn = exports[name]
    return lambda batch: fn(text=tf.constant(batch))["probabilities"].numpy()

  singles = [texts[i:i + 1] for i in range(FLAGS.serving_requests)]
  batches = [texts[i * 32:(i + 1) * 32] for i in range(FLAGS.serving_batches)]
  np.testing.assert_allclose(call("auto")(batches[0]), call("none")(batches[0]), atol=1e-4)
  latency = {name: [] for name in exports}
  throughput = {name: [] for name in exports}
  for name in exports:  # warm-up: every shape the requests meet
    for batch in singles + batches:
      call(name)(batch)
  for r in range(FLAGS.serving_rounds):
    for name in exports:
      fn = call(name)
      times = []
      for batch in singles:
        start = time.perf_counter()
        fn(batch)
        times.append(time.perf_counter() - start)
      latency[name].append(statistics.median(times) * 1000)
      start = time.perf_counter()
      for batch in batches:
        fn(batch)
      throughput[name].append(32 * len(batches) / (time.perf_counter() - start))
    print(f"  serving round {r + 1}: " + ", ".join(
        f"{n} {latency[n][-1]:.2f} ms, {throughput[n][-1]:.1f} texts/s" for n in exports),
          flush=True)
  latency_ratios = [b / a for a, b in zip(latency["auto"], latency["none"])]
  throughput_ratios = [a / b for a, b in zip(throughput["auto"], throughput["none"])]
  return [
      ("length_buckets auto", spread(latency["auto"]), f"{spread(latency_ratios)} lower",
       spread(throughput["auto"], 1), f"{spread(throughput_ratios)} higher",
       harness.goal_text(statistics.median(latency_ratios), SERVING_LATENCY_GOAL) +
       " (batch-1 latency)"),
      ("length_buckets none (fixed length)", spread(latency["none"]), "",
       spread(throughput["none"], 1), "", "")]


def print_training_table(rows):
  print("| task (real length) | system | examples/s | ratio | goal | real-token GFLOP/s |")
  print("| --- | --- | --: | --: | --- | --: |")
  for row in rows:
    print("| " + " | ".join(row) + " |")
  sys.stdout.flush()


def load_text():
  load = os.getloadavg()
  return f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"


def apply_smoke():
  """--smoke's settings (the module docstring)."""
  harness.apply_smoke(FLAGS)
  FLAGS.bert_config_file = os.path.join(finetuning.REPO_ROOT, "configs", "bert_config_tiny.json")
  FLAGS.length_tasks, FLAGS.examples, FLAGS.seq_length, FLAGS.batch_size = ["short"], 64, 128, 8
  FLAGS.serving_requests, FLAGS.serving_batches, FLAGS.serving_rounds = 4, 1, 1
  if not FLAGS["skip_serving"].present:
    FLAGS.skip_serving = True
    print("smoke: the serving rows left out (two SavedModel exports, most of a minute; "
          "--noskip_serving keeps them)", flush=True)


def main():
  if FLAGS.smoke:
    apply_smoke()
  unknown = sorted(set(FLAGS.length_tasks) - set(TASKS))
  unknown_systems = sorted((set(FLAGS.systems) | set(FLAGS.squad_systems)) - set(SYSTEMS))
  if unknown or unknown_systems:
    raise app.UsageError(f"--length_tasks / --systems / --squad_systems: unknown "
                         f"{', '.join(unknown + unknown_systems)}; tasks: {', '.join(TASKS)}; "
                         f"systems: {', '.join(SYSTEMS)}")
  import keras  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from bert_tf import tokenization  # pylint: disable=g-import-not-at-top
  start_load = load_text()
  started = time.time()
  corpora = corpus_documents(FLAGS.corpora)
  if not corpora:
    raise app.UsageError(f"--corpora: none of {', '.join(FLAGS.corpora)} exists")
  tokenizer = tokenization.FullTokenizer(FLAGS.vocab_file, do_lower_case=True)
  config = model_config()
  peak = peers.matmul_peak_gflops(tf)
  print(f"float32 matmul peak at {FLAGS.threads} thread(s): {peak:.1f} GFLOP/s", flush=True)
  rows, serving = [], []
  sizes = (f"L{config.num_hidden_layers} H{config.hidden_size} A{config.num_attention_heads} "
           f"I{config.intermediate_size}")
  # One path for the whole run: the file is rewritten after each task, so a run cut short
  # (killed, out of memory) keeps the tasks it finished, marked incomplete.
  path = FLAGS.results_file or finetuning.results_file.default_path(
      "length_aware", FLAGS.smoke, time.strftime("%Y-%m-%d", time.gmtime()))
  save = lambda complete: write_results(sizes, peak, rows, serving, complete, path)
  with tempfile.TemporaryDirectory() as directory:
    for task in FLAGS.length_tasks:
      task_rows = training_rows(np, task, config, corpora, tokenizer, directory, peak)
      print_training_table(task_rows)  # now, so a run cut short keeps its finished tasks
      rows.extend(task_rows)
      save(complete=False)
      keras.utils.clear_session(free_memory=True)  # the task's models and steps go
    if not FLAGS.skip_serving:
      print("serving", flush=True)
      texts = select_texts(corpora, tokenizer, max(FLAGS.serving_requests,
                                                   32 * FLAGS.serving_batches),
                           SHORT_RANGE, random.Random(f"{FLAGS.data_seed}-serving"), pair=False)
      serving = serving_rows(np, tf, config, texts, directory)
  print(f"\n{sizes}, batch {FLAGS.batch_size}, max length {FLAGS.seq_length} (squad "
        f"{FLAGS.max_seq_length}), length buckets {FLAGS.length_buckets}, {FLAGS.threads} "
        f"thread(s), {FLAGS.warmup_steps} warm-up steps then {FLAGS.rounds} rounds x "
        f"{FLAGS.steps} steps (squad {FLAGS.squad_warmup_steps} then {FLAGS.squad_steps}); "
        f"median (min-max) over rounds, ratios round by round; {peers.kernels_text()}; "
        f"matmul peak {peak:.1f} GFLOP/s; "
        f"{os.cpu_count()} CPUs, {start_load} at the start, {load_text()} at the end, "
        f"{time.time() - started:.0f} s")
  if rows:
    print_training_table(rows)
  if serving:
    print(f"\nServing, short sentences ({SHORT_RANGE[0]}-{SHORT_RANGE[1]} WordPieces), "
          f"{FLAGS.serving_rounds} rounds of {FLAGS.serving_requests} batch-1 requests and "
          f"{FLAGS.serving_batches} batch-32 requests per export")
    print("| export | batch 1 latency (ms) | latency ratio | batch 32 (texts/s) | "
          "throughput ratio | goal |")
    print("| --- | --: | --: | --: | --: | --- |")
    for row in serving:
      print("| " + " | ".join(row) + " |")
  save(complete=True)


def write_results(sizes, peak, rows, serving, complete, path):
  """The results file of the rows so far (`complete` False while tasks remain)."""
  training_keys = ("task", "system", "examples_per_second", "ratio", "goal",
                   "real_token_gflops")
  serving_keys = ("export", "batch1_latency_ms", "latency_ratio", "batch32_texts_per_second",
                  "throughput_ratio", "goal")
  finetuning.results_file.write("length_aware", dict(
      settings=dict(sizes=sizes, batch_size=FLAGS.batch_size, seq_length=FLAGS.seq_length,
                    length_buckets=FLAGS.length_buckets, threads=FLAGS.threads,
                    warmup_steps=FLAGS.warmup_steps, rounds=FLAGS.rounds, steps=FLAGS.steps,
                    tasks=FLAGS.length_tasks, examples=FLAGS.examples,
                    squad_systems=FLAGS.squad_systems),
      complete=complete, matmul_peak_gflops=peak, kernels=peers.kernels_text(),
      training=[dict(zip(training_keys, row)) for row in rows],
      serving=[dict(zip(serving_keys, row)) for row in serving]), FLAGS.smoke, path)


if __name__ == "__main__":
  harness.run(main, FLAGS, hf_model)
