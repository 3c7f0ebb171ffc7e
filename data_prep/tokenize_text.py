r"""Tokenizes a corpus into WordPiece tokens, one output line per input line.

Useful to check a vocab on a corpus before making pretraining data: the summary says how many
wordpieces each word becomes and how many are [UNK]. Blank lines (document boundaries) are kept.

Usage:
  python data_prep/tokenize_text.py --input_file=corpus.txt --vocab_file=vocab.txt \
      --output_file=corpus.tokens.txt [--output_ids]
"""

import os
import sys
import time

from absl import app
from absl import flags
from absl import logging
import tensorflow as tf

if __package__ in (None, ""):
  # Run as a script: make the repository root importable.
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bert_tf import tokenization  # pylint: disable=g-import-not-at-top
from data_prep import corpus  # pylint: disable=g-import-not-at-top

FLAGS = flags.FLAGS


def define_flags():
  flags.DEFINE_string("input_file", None, "Input text files: comma-separated paths and globs.")
  flags.DEFINE_string("vocab_file", None, "WordPiece vocab, one token per line.")
  flags.DEFINE_bool("do_lower_case", True, "Lower-case and strip accents (uncased vocabs).")
  flags.DEFINE_string("output_file", None, "Where to write the tokens (space-separated).")
  flags.DEFINE_bool("output_ids", False, "Write vocab ids instead of token strings.")
  flags.DEFINE_enum("errors", "strict", ["strict", "replace", "skip"],
                    "Invalid UTF-8 in the input: stop with the file and line, replace the "
                    "bad bytes, or skip the line.")
  flags.DEFINE_bool("overwrite", False, "Replace an existing --output_file.")
  flags.mark_flags_as_required(["input_file", "vocab_file", "output_file"])


def tokenize_files(paths, tokenizer, out, output_ids=False, errors="strict",
                   log_every_s=10.0):
  """Writes each input line's wordpieces to `out`; returns counts for the summary."""
  stats = {"lines": 0, "wordpieces": 0, "unknown": 0, "bytes": 0}
  unk_id = tokenizer.vocab["[UNK]"]
  total = max(1, corpus.total_size(paths))
  start = last_log = time.time()
  report = corpus.ReadReport()
  for path in paths:
    for line in corpus.iter_lines(path, errors, report):
      ids = tokenizer.tokenize_to_ids(line)
      stats["lines"] += 1
      stats["bytes"] = report.bytes
      stats["wordpieces"] += len(ids)
      stats["unknown"] += ids.count(unk_id)
      if output_ids:
        out.write(" ".join(map(str, ids)) + "\n")
      else:
        out.write(" ".join(tokenizer.convert_ids_to_tokens(ids)) + "\n")
      now = time.time()
      if now - last_log >= log_every_s:
        last_log = now
        rate = stats["bytes"] / (now - start)
        logging.info("tokenizing: %.1f/%.1f MB (%.2f MB/s, ETA %.0f s)", stats["bytes"] / 1e6,
                     total / 1e6, rate / 1e6, (total - stats["bytes"]) / rate)
  stats["seconds"] = time.time() - start
  return stats


def main(argv):
  del argv
  try:
    paths = corpus.expand_input_files(corpus.split_list(FLAGS.input_file), sort=True)
    if tf.io.gfile.exists(FLAGS.output_file) and not FLAGS.overwrite:
      raise ValueError(f"--output_file {FLAGS.output_file} exists; pass --overwrite to replace it")
    tokenizer = tokenization.FullTokenizer(FLAGS.vocab_file, do_lower_case=FLAGS.do_lower_case)
    tmp = FLAGS.output_file + ".tmp-tokenize_text"
    try:
      with tf.io.gfile.GFile(tmp, "w") as out:
        stats = tokenize_files(paths, tokenizer, out, output_ids=FLAGS.output_ids,
                               errors=FLAGS.errors)
    except BaseException:
      if tf.io.gfile.exists(tmp):
        tf.io.gfile.remove(tmp)
      raise
    tf.io.gfile.rename(tmp, FLAGS.output_file, overwrite=True)
  except (ValueError, OSError) as e:  # bad flags, vocab or input: a message, not a trace.
    sys.exit(f"tokenize_text.py: error: {e}")
  print(f"wrote {FLAGS.output_file}: {stats['lines']} lines, {stats['wordpieces']} wordpieces, "
        f"[UNK] {100 * stats['unknown'] / max(1, stats['wordpieces']):.3f}%, "
        f"{stats['bytes'] / 1e6 / max(stats['seconds'], 1e-9):.2f} MB/s")


if __name__ == "__main__":
  define_flags()
  app.run(main)
