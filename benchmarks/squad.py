"""SQuAD: data step (feature conversion, post-processing) against the original's, and span
fine-tuning throughput against Model Garden and Hugging Face.

  python benchmarks/squad.py --presets=mini,small --threads=1

One run measures, on the same data and configuration for every system:

1. The data step of run_squad on a SQuAD 2.0-format train file and dev file of --questions
   questions each, built (deterministically) from the English corpora of --corpora: contexts of
   consecutive sentences of one document, 120-200 words (every 20th 250-400, so some contexts
   need several windows), 3-7 questions per context, a third of them unanswerable;
   question `What follows "<4-8 words of a sentence>"?`, answer the next 1-3 words with their
   surrounding punctuation stripped. Without the corpora the committed fixtures
   tests/data/squad/{train,dev}-v2.0.json are replicated up to --questions. Settings are the
   original's defaults: max_seq_length 384, doc_stride 128, max_query_length 64, n_best_size 20,
   max_answer_length 30.
     ours:     bert_tf.tasks.squad_data with bert_tf.tokenization.FullTokenizer:
               read_squad_examples, convert_examples_to_features into a FeatureWriter
               (train.tf_record, is_training=True, SQuAD 2.0; eval.tf_record, keeping the
               features as run_squad does), and squad_answers.write_predictions;
     original: tests/tasks/squad/squad_reference.py, a literal restatement of the original
               run_squad.py's loops (read_examples, convert, feature_record + SerializeToString()
               into a tf.io.TFRecordWriter, predictions + json.dumps(indent=4) into tf.io.gfile
               files), driven by the original release's character-at-a-time tokenizer
               (NaiveTokenizer of benchmarks/tokenization.py, via finetuning.load_naive_tokenizer,
               with the string-returning tokenize / convert_tokens_to_ids the original's
               FullTokenizer has) and, in get_final_text, the original's BasicTokenizer (the
               same character-at-a-time code).
   "Conversion" is reading both files and writing both record files (train then eval);
   "post-processing" is writing predictions.json, nbest_predictions.json (and null_odds.json for
   v2) from fixed random float32 logits for every eval window (context positions ~N(0, 1), the
   others 6 lower, as a trained model ranks them), given as lists of Python floats as run_squad
   passes them, once as SQuAD 1.1 and once as 2.0. Tokenizers are built outside the timing,
   afresh for every repeat (ours caches WordPieces per word); the best of --conversion_repeats
   timings counts. Both sides must agree: the record files record by record (parsed messages,
   and our bytes against the original message's deterministic serialisation) and the three
   JSON files text for text, leaving out the questions where the original crashes (SQuAD 2.0
   with no non-null candidate; reported, none expected with these logits).

2. Training examples/s of the span labeler (batch --batch_size, sequence --seq_length, random
   batches with start/end positions inside the unpadded part, 0 for a third) at each preset:
     ours:         bert_tf.tasks.squad.head.build_span_model trained by
                   bert_tf.training.loop.Trainer
                   with squad.TASK and optimization.create_optimizer("adamw"), clipping 1.0;
     Model Garden: official.nlp.modeling.models.BertSpanLabeler over networks.BertEncoder of the
                   same sizes (benchmarks/peers.py), OptimizerFactory "adamw" as finetuning.py,
                   and question_answering's loss (mean start and end sparse categorical
                   cross-entropy, halved) with its start/end accuracy counts, run by a
                   tf.function loop through strategy.run;
     Hugging Face: transformers.BertForQuestionAnswering (PyTorch eager; its loss is the same
                   (start + end) / 2) with torch.optim.AdamW, linear warmup/decay and
                   clip_grad_norm_ 1.0, in a worker process (PyTorch and TensorFlow crash in one
                   process); only when torch and transformers import.
   The rounds work as in finetuning.py: --warmup_steps untimed steps each, then --rounds rounds
   of --steps steps in turn; the median round counts. The default sequence is 128 (SQuAD's 384
   is --seq_length=384, about 3.5x the time).

The shared knobs (--presets, --batch_size, --seq_length, --steps, --rounds, --warmup_steps,
--pool_batches, --learning_rate, --threads, --systems, --vocab_file, --conversion_repeats,
--skip_training and the internal --hf_worker_dir) are finetuning.py's flags: this script imports
finetuning for its load_naive_tokenizer, check_same_records and GOALS, which defines them. The
three training systems, the timing rounds and the table rows are benchmarks/harness.py's, as
finetuning.py's; this script names the span task's pieces (model, loss, head, batch pool).
"""

import collections
import glob
import json
import os
import random
import re
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

REPO_ROOT = finetuning.REPO_ROOT
flags.DEFINE_list("corpora", finetuning.corpora.paths(),
                  "Corpora (one sentence per line, blank lines between documents; globs) the "
                  "SQuAD files are made from; the English ones, SQuAD being English. If none "
                  "exists, the fixtures tests/data/squad/{train,dev}-v2.0.json are replicated.")
flags.DEFINE_integer("questions", 2000, "Questions in each of the train and dev files.")
flags.DEFINE_integer("max_seq_length", 384, "Conversion: tokens per window.")
flags.DEFINE_integer("doc_stride", 128, "Conversion: step between window starts.")
flags.DEFINE_integer("max_query_length", 64, "Conversion: question WordPieces kept.")
flags.DEFINE_integer("n_best_size", 20, "Post-processing: n-best size.")
flags.DEFINE_integer("max_answer_length", 30, "Post-processing: longest answer in WordPieces.")
flags.DEFINE_bool("skip_data", False, "Leave out the conversion and post-processing rows.")
flags.DEFINE_bool("profile", False, "After the timings, profile (cProfile) our conversion and "
                  "post-processing once each and print the top functions by own time.")
flags.DEFINE_integer("profile_rows", 25, "Functions printed per profile.")
FLAGS = flags.FLAGS

GOALS = dict(finetuning.GOALS)
NAMES = {"ours": "ours (bert_tf loop.Trainer, build_span_model)",
         "model_garden": "Model Garden BertSpanLabeler",
         "hf_torch": "HF BertForQuestionAnswering (PyTorch eager)"}
FIXTURES = os.path.join(REPO_ROOT, "tests", "data", "squad")


# === Data: the SQuAD files ===


def read_documents(path):
  """Documents (lists of lines, whitespace collapsed to single spaces) of a corpus file."""
  documents, lines = [], []
  with open(path, encoding="utf-8") as f:
    for line in f:
      line = " ".join(line.split())
      if line:
        lines.append(line)
      elif lines:
        documents.append(lines)
        lines = []
  if lines:
    documents.append(lines)
  return documents


def document_paragraphs(lines, rng, number):
  """Contexts of consecutive lines of 120-200 words (every 20th by `number`, 250-400): lines
  are added up to a random target in that range, and a context closes before a line that would
  take it past the range."""
  paragraphs, current, words = [], [], 0
  bounds = target = None
  for line in lines:
    if target is None:
      number += 1
      bounds = (250, 400) if number % 20 == 0 else (120, 200)
      target = rng.randint(*bounds)
    length = len(line.split(" "))
    if words >= bounds[0] and words + length > bounds[1]:
      paragraphs.append(current)
      current, words, target = [], 0, None
      continue  # the line is dropped: the next context starts after it
    current.append(line)
    words += length
    if words >= target:
      paragraphs.append(current)
      current, words, target = [], 0, None
  return paragraphs, number


_STRIP = "".join(chr(c) for c in range(33, 127) if not chr(c).isalnum()) + \
    "\u2018\u2019\u201c\u201d\u2014\u2013\u2026"
_TEMPLATES = ('What follows "{}"?', 'Which words come after "{}"?',
              'In the passage, what comes right after "{}"?')


def make_question(lines, rng, qas_id, other_lines):
  """A question on the context `lines` (joined by spaces); unanswerable (quoting other_lines)
  a third of the time. None if no line is long enough."""
  if rng.random() < 1 / 3:
    long_lines = [line.split(" ") for line in other_lines if len(line.split(" ")) >= 6]
    if not long_lines:
      return None
    words = rng.choice(long_lines)
    length = rng.randint(4, min(8, len(words)))
    start = rng.randint(0, len(words) - length)
    return {"id": qas_id, "question": rng.choice(_TEMPLATES).format(
        " ".join(words[start:start + length])), "answers": [], "is_impossible": True}
  offsets, offset = [], 0
  for line in lines:
    offsets.append(offset)
    offset += len(line) + 1
  candidates = [i for i, line in enumerate(lines) if len(line.split(" ")) >= 7]
  for _ in range(10):
    if not candidates:
      return None
    i = rng.choice(candidates)
    spans = [m.span() for m in re.finditer(r"\S+", lines[i])]
    length = rng.randint(4, min(8, len(spans) - 2))
    answer_words = rng.randint(1, min(3, len(spans) - length))
    start = rng.randint(0, len(spans) - length - answer_words)
    first, last = spans[start + length], spans[start + length + answer_words - 1]
    raw = lines[i][first[0]:last[1]]
    text = raw.strip(_STRIP)
    if not any(c.isalnum() for c in text):
      continue
    quote = lines[i][spans[start][0]:spans[start + length - 1][1]]
    answer_start = offsets[i] + first[0] + len(raw) - len(raw.lstrip(_STRIP))
    return {"id": qas_id, "question": rng.choice(_TEMPLATES).format(quote),
            "answers": [{"text": text, "answer_start": answer_start}], "is_impossible": False}
  return None


def squad_from_corpora(paths, questions, seed=12345):
  """(train, dev) SQuAD 2.0 dicts of `questions` questions each, contexts taking turns among the
  corpora (up to 4 consecutive contexts of a document, then its next document) and between the
  two files."""
  rng = random.Random(seed)
  streams = []
  for path in paths:
    name = os.path.splitext(os.path.basename(path))[0]
    # name bound now: a generator expression would read it when iterated (the last corpus's)
    streams.append(iter([(name, d, lines) for d, lines in enumerate(read_documents(path))]))
  files = [collections.OrderedDict(), collections.OrderedDict()]  # title -> paragraphs
  counts = [0, 0]
  number = 0
  previous = ["(none)"]
  turn = 0
  while min(counts) < questions:
    if not streams:
      raise app.UsageError(f"the corpora hold fewer than 2 x {questions} questions' contexts")
    stream = streams[turn % len(streams)]
    turn += 1
    try:
      name, d, lines = next(stream)
    except StopIteration:
      streams.remove(stream)
      continue
    paragraphs, number = document_paragraphs(lines, rng, number)
    for p, context_lines in enumerate(paragraphs[:4]):
      side = 0 if counts[0] <= counts[1] else 1
      if counts[side] >= questions:
        side = 1 - side
      qas = []
      for k in range(rng.randint(3, 7)):
        if counts[side] + len(qas) >= questions:
          break
        question = make_question(context_lines, rng, f"{name}-{d:04d}-{p}-{k}", previous)
        if question is not None:
          qas.append(question)
      previous = context_lines
      if qas:
        files[side].setdefault(f"{name}-{d:04d}", []).append(
            {"context": " ".join(context_lines), "qas": qas})
        counts[side] += len(qas)
  return [{"version": "v2.0", "data": [{"title": t, "paragraphs": ps} for t, ps in f.items()]}
          for f in files]


def squad_from_fixtures(questions):
  """(train, dev): the v2.0 fixtures with their paragraphs replicated (ids suffixed -r<k>) up to
  `questions` questions each."""
  out = []
  for split in ("train", "dev"):
    with open(os.path.join(FIXTURES, f"{split}-v2.0.json"), encoding="utf-8") as f:
      articles = json.load(f)["data"]
    data, count, k = [], 0, 0
    while count < questions:
      for article in articles:
        paragraphs = []
        for paragraph in article["paragraphs"]:
          qas = [dict(qa, id=f"{qa['id']}-r{k}") for qa in paragraph["qas"]]
          qas = qas[:questions - count]
          count += len(qas)
          if qas:
            paragraphs.append(dict(paragraph, qas=qas))
        if paragraphs:
          data.append({"title": f"{article['title']}-r{k}", "paragraphs": paragraphs})
      k += 1
    out.append({"version": "v2.0", "data": data})
  return out


def write_squad_files(directory):
  """Writes train.json and dev.json; returns their paths and a description of the source."""
  paths = []
  for pattern in FLAGS.corpora:
    paths.extend(p for p in sorted(glob.glob(pattern)) if p not in paths)
  if paths:
    train, dev = squad_from_corpora(paths, FLAGS.questions)
    source = "contexts from " + ", ".join(os.path.basename(p) for p in paths)
  else:
    train, dev = squad_from_fixtures(FLAGS.questions)
    source = "the v2.0 fixtures replicated (no corpora found)"
  files = []
  for name, content in (("train", train), ("dev", dev)):
    files.append(os.path.join(directory, f"{name}.json"))
    with open(files[-1], "w", encoding="utf-8") as f:
      json.dump(content, f)
  return files, source


def describe(squad_file):
  """(questions, unanswerable, contexts, mean context words) of a SQuAD file."""
  with open(squad_file, encoding="utf-8") as f:
    paragraphs = [p for a in json.load(f)["data"] for p in a["paragraphs"]]
  qas = [qa for p in paragraphs for qa in p["qas"]]
  words = statistics.mean(len(p["context"].split()) for p in paragraphs)
  return len(qas), sum(qa.get("is_impossible", False) for qa in qas), len(paragraphs), words


# === Data: the original-equivalent side ===


def original_tokenizers():
  """(FullTokenizer class, BasicTokenizer class) of the original release's algorithm: the
  character-at-a-time NaiveTokenizer with the original's string interface added."""
  naive = finetuning.load_naive_tokenizer()

  class OriginalFullTokenizer(naive):
    """tokenize() returns WordPiece strings ("[UNK]" for a word without pieces) and
    convert_tokens_to_ids looks them up one by one, as the original FullTokenizer."""

    def _wordpiece_tokens(self, word):
      chars = list(word)
      if len(chars) > 200:
        return ["[UNK]"]
      output = []
      start = 0
      while start < len(chars):
        end = len(chars)
        found = None
        while start < end:
          piece = "".join(chars[start:end])
          if start > 0:
            piece = "##" + piece
          if piece in self.vocab:
            found = piece
            break
          end -= 1
        if found is None:
          return ["[UNK]"]
        output.append(found)
        start = end
      return output

    def tokenize(self, text):
      split_tokens = []
      for token in self._basic(text):
        for sub_token in self._wordpiece_tokens(token):
          split_tokens.append(sub_token)
      return split_tokens

    def convert_tokens_to_ids(self, tokens):
      output = []
      for token in tokens:
        output.append(self.vocab[token])
      return output

  class OriginalBasicTokenizer:
    """The original's BasicTokenizer (get_final_text builds one per call)."""

    def __init__(self, do_lower_case=True):
      self._naive = naive.__new__(naive)
      self._naive.do_lower_case = do_lower_case

    def tokenize(self, text):
      return self._naive._basic(text)  # pylint: disable=protected-access

  return OriginalFullTokenizer, OriginalBasicTokenizer


def load_reference(basic_tokenizer):
  """tests/tasks/squad/squad_reference.py as a private module whose `tokenization` is the original's
  (its BasicTokenizer, used by final_text, is the character-at-a-time one)."""
  import importlib.util  # pylint: disable=g-import-not-at-top
  from bert_tf import tokenization  # pylint: disable=g-import-not-at-top
  path = os.path.join(REPO_ROOT, "tests", "tasks", "squad", "squad_reference.py")
  spec = importlib.util.spec_from_file_location("squad_reference_original", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  module.tokenization = types.SimpleNamespace(
      BasicTokenizer=basic_tokenizer, whitespace_tokenize=tokenization.whitespace_tokenize)
  return module


def original_convert(ref, tokenizer, train_file, dev_file, train_record, eval_record):
  """The original's data step: train records (SQuAD 2.0) and eval records; (eval examples, eval
  features, train feature count)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  counts = [0]
  train_examples = ref.read_examples(train_file, True, True)
  writer = tf.io.TFRecordWriter(train_record)

  def write_train(feature):
    counts[0] += 1
    writer.write(ref.feature_record(feature, True).SerializeToString())
  ref.convert(train_examples, tokenizer, FLAGS.max_seq_length, FLAGS.doc_stride,
              FLAGS.max_query_length, True, write_train)
  writer.close()
  eval_examples = ref.read_examples(dev_file, False, True)
  eval_features = []
  writer = tf.io.TFRecordWriter(eval_record)

  def write_eval(feature):
    eval_features.append(feature)
    writer.write(ref.feature_record(feature, False).SerializeToString())
  ref.convert(eval_examples, tokenizer, FLAGS.max_seq_length, FLAGS.doc_stride,
              FLAGS.max_query_length, False, write_eval)
  writer.close()
  return eval_examples, eval_features, counts[0]


def original_postprocess(ref, examples, features, results, version_2, directory):
  """The original's write_predictions: the three files; returns their texts and the questions
  where the original crashes (left out)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  predictions, nbest, null_odds, crashed = ref.predictions(
      examples, features, results, FLAGS.n_best_size, FLAGS.max_answer_length, True,
      version_2, 0.0)
  texts = {}
  for name, value in (("predictions", predictions), ("nbest", nbest), ("null_odds", null_odds)):
    if name == "null_odds" and not version_2:
      continue
    texts[name] = json.dumps(value, indent=4) + "\n"
    with tf.io.gfile.GFile(os.path.join(directory, f"{name}.json"), "w") as writer:
      writer.write(texts[name])
  return texts, crashed


# === Data: ours ===


def ours_convert(tokenizer, train_file, dev_file, train_record, eval_record):
  """Our data step, as squad_run: (eval examples, eval features, train feature count)."""
  from bert_tf.tasks.squad import data as squad_data  # pylint: disable=g-import-not-at-top
  train_examples = squad_data.read_squad_examples(train_file, True, True)
  with squad_data.FeatureWriter(train_record, is_training=True) as writer:
    train_count = squad_data.convert_examples_to_features(
        train_examples, tokenizer, FLAGS.max_seq_length, FLAGS.doc_stride,
        FLAGS.max_query_length, True, writer)
  eval_examples = squad_data.read_squad_examples(dev_file, False, True)
  eval_features = []
  with squad_data.FeatureWriter(eval_record, is_training=False) as writer:

    def append_feature(feature):
      eval_features.append(feature)
      writer.process_feature(feature)
    squad_data.convert_examples_to_features(
        eval_examples, tokenizer, FLAGS.max_seq_length, FLAGS.doc_stride,
        FLAGS.max_query_length, False, append_feature)
  return eval_examples, eval_features, train_count


def ours_postprocess(examples, features, results, version_2, directory):
  from bert_tf.tasks.squad import answers as squad_answers  # pylint: disable=g-import-not-at-top
  squad_answers.write_predictions(
      examples, features, results, FLAGS.n_best_size, FLAGS.max_answer_length, True,
      os.path.join(directory, "predictions.json"), os.path.join(directory, "nbest.json"),
      os.path.join(directory, "null_odds.json"), version_2_with_negative=version_2)


def random_results(np, features, seed=0):
  """RawResults of fixed random float32 logits for every feature (lists of Python floats, as
  run_squad passes them): context positions ~N(0, 1), every other position 6 lower, [CLS] too
  for the start and end logits alike."""
  from bert_tf.tasks.squad import answers as squad_answers  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(seed)
  results = []
  for feature in features:
    context = (np.asarray(feature.segment_ids) == 1) & (np.asarray(feature.input_mask) == 1)
    logits = rng.standard_normal((2, len(feature.input_ids))) - 6.0 * ~context
    logits = logits.astype(np.float32)
    results.append(squad_answers.RawResult(feature.unique_id, logits[0].tolist(),
                                           logits[1].tolist()))
  return results


def check_same_predictions(directory, texts, crashed):
  """Raises AssertionError unless our files hold the reference's texts (the questions where the
  reference crashed left out of ours first)."""
  for name, text in texts.items():
    file_name = {"predictions": "predictions.json", "nbest": "nbest.json",
                 "null_odds": "null_odds.json"}[name]
    with open(os.path.join(directory, file_name), encoding="utf-8") as f:
      ours = f.read()
    if crashed:
      value = json.loads(ours, object_pairs_hook=collections.OrderedDict)
      for qas_id in crashed:
        value.pop(qas_id, None)
      ours = json.dumps(value, indent=4) + "\n"
    assert ours == text, f"{file_name} differs"


def timed(fn):
  start = time.perf_counter()
  result = fn()
  return result, time.perf_counter() - start


def measure_data(np):
  """Best seconds of both sides for the conversion and post-processing, and what was done."""
  from bert_tf import tokenization  # pylint: disable=g-import-not-at-top
  original_full, original_basic = original_tokenizers()
  ref = load_reference(original_basic)
  best = collections.defaultdict(lambda: float("inf"))
  info = {}
  with tempfile.TemporaryDirectory() as tmp:
    (train_file, dev_file), source = write_squad_files(tmp)
    info["source"] = source
    info["train"], info["dev"] = describe(train_file), describe(dev_file)
    print(f"  data: {source}; train {info['train'][0]} questions ({info['train'][1]} "
          f"unanswerable) in {info['train'][2]} contexts of {info['train'][3]:.0f} words on "
          f"average, dev {info['dev'][0]} questions in {info['dev'][2]} contexts", flush=True)
    dirs = {side: os.path.join(tmp, side) for side in ("ours", "original")}
    for directory in dirs.values():
      os.makedirs(directory)
    records = {side: (os.path.join(d, "train.tf_record"), os.path.join(d, "eval.tf_record"))
               for side, d in dirs.items()}
    outputs = {}
    for repeat in range(FLAGS.conversion_repeats):
      seconds = {}
      for side in ("original", "ours"):  # the converters take turns
        if side == "ours":
          tokenizer = tokenization.FullTokenizer(FLAGS.vocab_file, do_lower_case=True)
          outputs[side], seconds[side] = timed(lambda: ours_convert(
              tokenizer, train_file, dev_file, *records[side]))
        else:
          tokenizer = original_full(FLAGS.vocab_file, do_lower_case=True)
          outputs[side], seconds[side] = timed(lambda: original_convert(
              ref, tokenizer, train_file, dev_file, *records[side]))
        best[("convert", side)] = min(best[("convert", side)], seconds[side])
      questions = info["train"][0] + info["dev"][0]
      print(f"  conversion repeat {repeat + 1}: " + ", ".join(
          f"{k} {questions / v:,.0f} questions/s ({v:.2f} s)" for k, v in seconds.items()),
            flush=True)
    (eval_examples, eval_features, train_count) = outputs["ours"]
    (ref_examples, ref_features, ref_train_count) = outputs["original"]
    assert train_count == ref_train_count and len(eval_features) == len(ref_features), (
        train_count, ref_train_count, len(eval_features), len(ref_features))
    finetuning.check_same_records(records["ours"][0], records["original"][0], train_count)
    finetuning.check_same_records(records["ours"][1], records["original"][1],
                                  len(eval_features))
    info.update(train_features=train_count, eval_features=len(eval_features),
                eval_examples=len(eval_examples))
    print(f"  conversion: {train_count} train and {len(eval_features)} eval records of both "
          "sides are identical", flush=True)

    results = random_results(np, eval_features)
    for version_2 in (False, True):
      key = "postprocess_v2" if version_2 else "postprocess_v1"
      for repeat in range(FLAGS.conversion_repeats):
        seconds = {}
        for side in ("original", "ours"):
          if side == "ours":
            _, seconds[side] = timed(lambda: ours_postprocess(
                eval_examples, eval_features, results, version_2, dirs[side]))
          else:
            (texts, crashed), seconds[side] = timed(lambda: original_postprocess(
                ref, ref_examples, ref_features, results, version_2, dirs[side]))
          best[(key, side)] = min(best[(key, side)], seconds[side])
        print(f"  post-processing {'v2' if version_2 else 'v1'} repeat {repeat + 1}: " +
              ", ".join(f"{k} {len(eval_examples) / v:,.0f} questions/s ({v:.2f} s)"
                        for k, v in seconds.items()), flush=True)
      check_same_predictions(dirs["ours"], texts, crashed)
      info[f"{key}_crashed"] = len(crashed)
      print(f"  post-processing {'v2' if version_2 else 'v1'}: the JSON files of both sides are "
            f"identical" + (f" (leaving out {len(crashed)} questions where the original crashes)"
                            if crashed else ""), flush=True)
    if FLAGS.profile:
      profile_ours(tokenization, train_file, dev_file, records["ours"], results, dirs["ours"])
  return best, info


def profile_ours(tokenization, train_file, dev_file, record_files, results, directory):
  """cProfile of one conversion (fresh tokenizer) and one v2 and v1 post-processing of ours."""
  import cProfile  # pylint: disable=g-import-not-at-top
  import io as stdio  # pylint: disable=g-import-not-at-top
  import pstats  # pylint: disable=g-import-not-at-top
  tokenizer = tokenization.FullTokenizer(FLAGS.vocab_file, do_lower_case=True)
  data = {}

  def convert():
    data["examples"], data["features"], _ = ours_convert(tokenizer, train_file, dev_file,
                                                         *record_files)
  runs = [("conversion", convert)]
  for version_2 in (True, False):
    runs.append((f"post-processing {'v2' if version_2 else 'v1'}",
                 lambda v=version_2: ours_postprocess(data["examples"], data["features"],
                                                      results, v, directory)))
  for name, fn in runs:
    profiler = cProfile.Profile()
    profiler.enable()
    fn()
    profiler.disable()
    text = stdio.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("tottime").print_stats(FLAGS.profile_rows)
    print(f"\n  profile of ours, {name} (by own time):")
    print("\n".join("    " + line for line in text.getvalue().splitlines() if line.strip()))


# === Training: data ===


def span_pool(np, vocab_size, batches, batch, seq, seed=0):
  """[batches * batch, ...] random examples of the span labeler's batch layout (numpy): a
  question of 4-20 tokens, then the context; answers inside the unpadded part, 0 for a third."""
  n = batches * batch
  rng, lengths, positions, pool = harness.random_inputs(np, vocab_size, n, seq, seq // 2, seed)
  question = rng.integers(6, 22, size=n)
  types = (positions >= question[:, None]).astype(np.int32) * pool["input_mask"]
  start = rng.integers(question, lengths - 1)
  end = np.minimum(start + rng.integers(0, 5, size=n), lengths - 2)
  none = rng.random(n) < 1 / 3
  start[none] = 0
  end[none] = 0
  return dict(pool, input_type_ids=types, start_positions=start.astype(np.int32),
              end_positions=end.astype(np.int32))


# === Training: systems ===
# Each returns (run(num_steps) that blocks until the steps are done, trainable parameters).


def ours(config, pool, total_steps, warmup):
  from bert_tf.tasks.squad import head as squad_head  # pylint: disable=g-import-not-at-top
  from bert_tf.tasks.squad import loss as squad  # pylint: disable=g-import-not-at-top
  return harness.ours(lambda: squad_head.build_span_model(config), squad.TASK, pool, total_steps,
                      warmup, FLAGS)


def model_garden(config, pool, total_steps, warmup):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from official.nlp.modeling import models as mg_models  # pylint: disable=g-import-not-at-top

  def build_head(encoder, initializer):
    return mg_models.BertSpanLabeler(network=encoder, initializer=initializer)

  def losses(outputs, batch):  # question_answering's build_losses
    start_logits, end_logits = outputs
    start_loss = harness.sparse_crossentropy(batch["start_positions"], start_logits)
    end_loss = harness.sparse_crossentropy(batch["end_positions"], end_logits)
    return (tf.reduce_mean(start_loss) + tf.reduce_mean(end_loss)) / 2

  def metrics(outputs, batch):  # its start/end position accuracies
    return [harness.correct_count(logits, batch[key])
            for logits, key in zip(outputs, ("start_positions", "end_positions"))]
  return harness.model_garden(config, pool, total_steps, warmup, FLAGS, build_head, losses,
                              metrics)


def hf_torch_model(spec, pool):
  """Hugging Face's PyTorch span labeler and its run function (in the worker process)."""
  import transformers  # pylint: disable=g-import-not-at-top
  return harness.hf_torch_model(
      spec, pool, lambda: transformers.BertForQuestionAnswering(
          peers.hf_bert_config(spec["config"])),
      labels={"start_positions": "start_positions", "end_positions": "end_positions"})


def hf_torch(config, pool, total_steps, warmup):
  """Hugging Face's PyTorch span labeler in a worker process; (None, reason) without torch."""
  return harness.hf_torch(__file__, "hf_squad_worker_", config, pool, total_steps, warmup,
                          FLAGS)


SYSTEMS = {"ours": ours, "model_garden": model_garden, "hf_torch": hf_torch}


def data_rows(np):
  """The data step's table rows (what, system, examples/s text, ratio text, goal text)."""
  print("data step", flush=True)
  best, info = measure_data(np)
  questions = info["train"][0] + info["dev"][0]
  rows = []
  steps = [("convert", f"conversion, {questions} questions -> {info['train_features']} train + "
            f"{info['eval_features']} eval records", questions,
            "ours (read_squad_examples, convert_examples_to_features, FeatureWriter)"),
           ("postprocess_v1", f"post-processing v1.1, {info['eval_examples']} questions",
            info["eval_examples"], "ours (write_predictions)"),
           ("postprocess_v2", f"post-processing v2.0, {info['eval_examples']} questions",
            info["eval_examples"], "ours (write_predictions)")]
  for key, what, count, ours_name in steps:
    ratio = best[(key, "original")] / best[(key, "ours")]
    rows.append((what, ours_name, f"{count / best[(key, 'ours')]:,.0f} "
                 f"({best[(key, 'ours')]:.2f} s)", "", ""))
    rows.append((what, "original-equivalent (squad_reference.py, naive tokenizer)",
                 f"{count / best[(key, 'original')]:,.0f} ({best[(key, 'original')]:.2f} s)",
                 f"{ratio:.1f}x", harness.goal_text(ratio, GOALS["original"])))
  return rows


# === Main ===


def main():
  import numpy as np  # pylint: disable=g-import-not-at-top
  if FLAGS.smoke:
    harness.apply_smoke(FLAGS)
    FLAGS.questions, FLAGS.conversion_repeats = 20, 1
    FLAGS.max_seq_length, FLAGS.doc_stride, FLAGS.max_query_length = 128, 64, 32
  rows = [] if FLAGS.skip_data else data_rows(np)
  if not FLAGS.skip_training:
    rows.extend(harness.training_rows(
        FLAGS, lambda config: span_pool(np, config.vocab_size, FLAGS.pool_batches,
                                        FLAGS.batch_size, FLAGS.seq_length),
        SYSTEMS, NAMES, GOALS, lambda preset: f"fine-tune {preset}, seq {FLAGS.seq_length}",
        skipped_goal=True))

  settings_text = (
      f"conversion: max_seq_length {FLAGS.max_seq_length}, doc_stride {FLAGS.doc_stride}, "
      f"max_query_length {FLAGS.max_query_length}; post-processing: n_best_size "
      f"{FLAGS.n_best_size}, max_answer_length {FLAGS.max_answer_length}; data best of "
      f"{FLAGS.conversion_repeats}, ratio original / ours. Training: "
      f"{harness.rounds_text(FLAGS)}, ratio ours / peer")
  harness.print_table(settings_text, "ratio", rows)
  harness.results_file.write("squad", harness.table_results(settings_text, rows), FLAGS.smoke,
                             FLAGS.results_file)


if __name__ == "__main__":
  harness.run(main, FLAGS, hf_torch_model)
