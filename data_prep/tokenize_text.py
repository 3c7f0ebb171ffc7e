r"""Tokenizes a corpus into WordPiece tokens, one output line per input line.

Useful to check a vocab on a corpus before making pretraining data: the summary says how many
wordpieces each word becomes and how many are [UNK]. Blank lines (document boundaries) are kept.

Usage:
  python data_prep/tokenize_text.py --input_file=corpus.txt --vocab_file=vocab.txt \
      --output_file=corpus.tokens.txt [--output_ids]
"""

import os
import sys

from absl import flags

if __package__ in (None, ""):
  # Run as a script from a clone without installing: make the repository root importable.
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bert_tf import cli  # pylint: disable=g-import-not-at-top,wrong-import-position
from bert_tf import io  # pylint: disable=g-import-not-at-top,wrong-import-position
from bert_tf import tokenization  # pylint: disable=g-import-not-at-top,wrong-import-position
from bert_tf.data import corpus  # pylint: disable=g-import-not-at-top,wrong-import-position

FLAGS = flags.FLAGS


def define_flags(flag_values=FLAGS):
  cli.define_text_input_flags(flag_values, overwrite_help="Replace an existing --output_file.")
  flags.DEFINE_string("vocab_file", None, "WordPiece vocab, one token per line.",
                      flag_values=flag_values)
  flags.DEFINE_bool("do_lower_case", True, "Lower-case and strip accents (uncased vocabs).",
                    flag_values=flag_values)
  flags.DEFINE_string("output_file", None, "Where to write the tokens (space-separated).",
                      flag_values=flag_values)
  flags.DEFINE_bool("output_ids", False, "Write vocab ids instead of token strings.",
                    flag_values=flag_values)
  flags.mark_flags_as_required(["input_file", "vocab_file", "output_file"],
                               flag_values=flag_values)


def main(argv):
  del argv
  paths = corpus.expand_input_files(cli.split_list(FLAGS.input_file), sort=True)
  if io.exists(FLAGS.output_file) and not FLAGS.overwrite:
    raise ValueError(f"--output_file {FLAGS.output_file} exists; pass --overwrite to replace it")
  tokenizer = tokenization.FullTokenizer(FLAGS.vocab_file, do_lower_case=FLAGS.do_lower_case)
  with io.atomic_write(FLAGS.output_file) as out:
    stats = corpus.tokenize_files(paths, tokenizer, out, output_ids=FLAGS.output_ids,
                                  errors=FLAGS.errors)
  print(f"wrote {FLAGS.output_file}: {stats['lines']} lines, {stats['wordpieces']} wordpieces, "
        f"[UNK] {100 * stats['unknown'] / max(1, stats['wordpieces']):.3f}%, "
        f"{stats['bytes'] / 1e6 / max(stats['seconds'], 1e-9):.2f} MB/s")


if __name__ == "__main__":
  cli.run(main, define_flags, "tokenize_text.py")
