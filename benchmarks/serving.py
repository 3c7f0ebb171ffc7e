"""Serving speed: the exported text model (in-graph tokenization) vs the encoder fed by Python.

For each model size, exports random weights with bert_tf.serving.saved_model (the speed does not
depend on the weights), loads the SavedModels back and times, on real sentences:
  text model     the `serving_default` signature of <name>/<version>: raw strings in
  python+encoder bert_tf.tokenization.FullTokenizer and the original packing in Python, then the
                 encoder SavedModel's `serving_default` on the ids
at batch 1 (median latency over the requests) and batch 32 (texts per second), both padded to
--seq_length. Prints one table; the ratio column is python+encoder time / text model time (above
1 means the in-graph path is faster end to end).

Usage (from the repository root):
  python benchmarks/serving.py --sizes=mini,small \\
      --corpus=../shared/data/corpora/austen_moby.txt \\
      --vocab_file=../shared/data/vocab/bert-base-uncased-vocab.txt
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)
DATA = os.path.join(os.path.dirname(REPO_ROOT), "shared", "data")  # ../shared/data
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from bert_tf import cli  # pylint: disable=wrong-import-position
cli.choose_cpu_kernels()  # the commands' kernels (oneDNN on x86-64), before TensorFlow loads
import keras  # pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np  # pylint: disable=wrong-import-position
import tensorflow as tf  # pylint: disable=wrong-import-position

from bert_tf.model import checkpoints  # pylint: disable=wrong-import-position
from bert_tf import config as config_lib  # pylint: disable=wrong-import-position
from bert_tf.serving import saved_model  # pylint: disable=wrong-import-position
from bert_tf import tokenization  # pylint: disable=wrong-import-position
from bert_tf.model.heads import build_pretraining_model  # pylint: disable=wrong-import-position


def read_sentences(path, count, min_chars=20):
  """The first `count` non-empty lines of at least min_chars characters."""
  sentences = []
  with open(path, encoding="utf-8") as f:
    for line in f:
      line = line.strip()
      if len(line) >= min_chars:
        sentences.append(line)
        if len(sentences) == count:
          break
  return sentences


def python_pack(tokenizer, texts, seq_length):
  """[CLS] A [SEP] packing of single texts in Python, as a client would do it."""
  cls_id, sep_id = tokenizer.vocab["[CLS]"], tokenizer.vocab["[SEP]"]
  ids = np.zeros([len(texts), seq_length], np.int32)
  mask = np.zeros([len(texts), seq_length], np.int32)
  for row, text in enumerate(texts):
    tokens = [cls_id] + tokenizer.tokenize_to_ids(text)[:seq_length - 2] + [sep_id]
    ids[row, :len(tokens)] = tokens
    mask[row, :len(tokens)] = 1
  return dict(input_word_ids=tf.constant(ids), input_mask=tf.constant(mask),
              input_type_ids=tf.zeros_like(ids))


def time_calls(fn, batches, warmup=2):
  for batch in batches[:warmup]:
    fn(batch)
  times = []
  for batch in batches:
    start = time.perf_counter()
    fn(batch)
    times.append(time.perf_counter() - start)
  return times


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--sizes", default="mini,small", help="Presets of bert_tf.config.")
  parser.add_argument("--corpus", default=os.path.join(DATA, "corpora", "austen_moby.txt"))
  parser.add_argument("--vocab_file",
                      default=os.path.join(DATA, "vocab", "bert-base-uncased-vocab.txt"))
  parser.add_argument("--seq_length", type=int, default=128)
  parser.add_argument("--rounds", type=int, default=3,
                      help="Alternating timing rounds; each path keeps its best.")
  parser.add_argument("--requests", type=int, default=100, help="Batch-1 requests timed.")
  parser.add_argument("--batches", type=int, default=10, help="Batch-32 requests timed.")
  args = parser.parse_args()

  sentences = read_sentences(args.corpus, max(args.requests, 32 * args.batches))
  tokenizer = tokenization.FullTokenizer(args.vocab_file, do_lower_case=True)
  singles = [sentences[i:i + 1] for i in range(args.requests)]
  batches = [sentences[i * 32:(i + 1) * 32] for i in range(args.batches)]
  rows = []
  for size in args.sizes.split(","):
    config = config_lib.preset(size)
    keras.utils.set_random_seed(0)
    weights = checkpoints.get_original_weights(build_pretraining_model(config))
    with tempfile.TemporaryDirectory() as export_dir:
      paths = saved_model.export_serving_models(config, weights, args.vocab_file, export_dir,
                                            seq_length=args.seq_length, warmup=False)
      text_fn = tf.saved_model.load(paths["text"]).signatures["serving_default"]
      encoder_fn = tf.saved_model.load(paths["encoder"]).signatures["serving_default"]

      def text_model(texts):
        return text_fn(text=tf.constant(texts))["pooled_output"].numpy()

      def python_encoder(texts):
        return encoder_fn(**python_pack(tokenizer, texts, args.seq_length))["pooled_output"].numpy()

      # Same answers from both paths (the packing is the same for single texts).
      np.testing.assert_allclose(text_model(batches[0]), python_encoder(batches[0]), atol=1e-4)
      # The two paths take turns, round after round, and each keeps its best round: on a shared
      # machine a burst of other work then hits both alike instead of whichever ran during it.
      best = {}
      for _ in range(args.rounds):
        for name, fn in (("text model", text_model), ("python+encoder", python_encoder)):
          latency = statistics.median(time_calls(fn, singles)) * 1000
          throughput = 32 * len(batches) / sum(time_calls(fn, batches))
          old_latency, old_throughput = best.get(name, (float("inf"), 0.0))
          best[name] = (min(latency, old_latency), max(throughput, old_throughput))
      for name in ("text model", "python+encoder"):
        rows.append((size, name) + best[name])
  print(f"\nseq_length {args.seq_length}, {os.cpu_count()} CPUs, corpus {args.corpus}")
  print(f"| model | path | batch 1 latency (ms, median) | batch 32 (texts/s) | "
        f"latency ratio | throughput ratio |")
  print("| --- | --- | --- | --- | --- | --- |")
  for i in range(0, len(rows), 2):
    text_row, python_row = rows[i], rows[i + 1]
    for row in (text_row, python_row):
      ratios = ("%.2f" % (python_row[2] / text_row[2]), "%.2f" % (text_row[3] / python_row[3])) \
          if row is text_row else ("1.00", "1.00")
      print(f"| {row[0]} | {row[1]} | {row[2]:.2f} | {row[3]:.1f} | {ratios[0]} | {ratios[1]} |")


if __name__ == "__main__":
  main()
