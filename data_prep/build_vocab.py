r"""Learns a WordPiece vocabulary from a corpus, in the original BERT vocab layout.

The original release never shipped its vocabulary learner. This one splits words exactly as
bert_tf's tokenizer does (so every learned piece is reachable), counts them, and runs
tensorflow-text's WordPiece learner (a frequency-threshold search) on the counts.

The written vocab has the released BERT vocabs' layout and exactly --vocab_size lines
(bert_config.json's vocab_size); bert_tf/data/vocab.py describes it.

Usage:
  python data_prep/build_vocab.py --input_file=corpus.txt --vocab_file=vocab.txt \
      --vocab_size=30522 --do_lower_case=True
"""

import os
import sys

from absl import flags
from absl import logging

if __package__ in (None, ""):
  # Run as a script from a clone without installing: make the repository root importable.
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bert_tf import cli  # pylint: disable=g-import-not-at-top,wrong-import-position
from bert_tf import io  # pylint: disable=g-import-not-at-top,wrong-import-position
from bert_tf.data import corpus  # pylint: disable=g-import-not-at-top,wrong-import-position
from bert_tf.data import vocab as vocab_lib  # pylint: disable=g-import-not-at-top,wrong-import-position

FLAGS = flags.FLAGS


def define_flags(flag_values=FLAGS):
  cli.define_text_input_flags(flag_values, overwrite_help="Replace an existing --vocab_file.")
  flags.DEFINE_string("vocab_file", None, "Where to write the vocabulary, one token per line.",
                       flag_values=flag_values)
  flags.DEFINE_integer("vocab_size", 30522, "Number of lines of the written vocab.",
                       flag_values=flag_values)
  flags.DEFINE_bool("do_lower_case", True, "Lower-case and strip accents before learning. "
                    "Use the same value when tokenizing with the vocab.",
                       flag_values=flag_values)
  flags.DEFINE_integer("num_unused", 994, "[unusedN] slots in the reserved block "
                       "(994 as in the released vocabs; 0 for none).",
                       flag_values=flag_values)
  flags.DEFINE_integer("max_unique_chars", 1000, "Alphabet size: rarer characters become "
                       "[UNK]. Raise it for Chinese or Japanese corpora (e.g. 8000).",
                       flag_values=flag_values)
  flags.DEFINE_integer("max_token_length", 50, "Longest word (characters) learned from.",
                       flag_values=flag_values)
  flags.DEFINE_integer("max_input_words", 5_000_000, "Most frequent distinct words learned from.",
                       flag_values=flag_values)
  flags.mark_flags_as_required(["input_file", "vocab_file"], flag_values=flag_values)


def main(argv):
  del argv
  paths = corpus.expand_input_files(cli.split_list(FLAGS.input_file), sort=True)
  if io.exists(FLAGS.vocab_file) and not FLAGS.overwrite:
    raise ValueError(f"--vocab_file {FLAGS.vocab_file} exists; pass --overwrite to replace it")
  for name in ("num_unused", "max_input_words", "max_token_length", "max_unique_chars"):
    if FLAGS[name].value < (0 if name == "num_unused" else 1):
      raise ValueError(f"--{name} must be >= {0 if name == 'num_unused' else 1}, got "
                       f"{FLAGS[name].value}")
  io.check_writable(FLAGS.vocab_file)  # before learning, which takes minutes on a real corpus
  logging.info("learning a %d-token vocab from %d file(s)", FLAGS.vocab_size, len(paths))
  counts = vocab_lib.count_words(paths, FLAGS.do_lower_case, errors=FLAGS.errors)
  vocab = vocab_lib.build_vocab(counts, FLAGS.vocab_size, num_unused=FLAGS.num_unused,
                      max_unique_chars=FLAGS.max_unique_chars,
                      max_token_length=FLAGS.max_token_length,
                      max_input_words=FLAGS.max_input_words)
  vocab_lib.write_vocab(vocab, FLAGS.vocab_file)
  stats = vocab_lib.unknown_rate(counts, vocab)
  num_learned = len(vocab) - len(vocab_lib.reserved_tokens(FLAGS.num_unused)) - sum(
      t.startswith("[unused") for t in vocab[len(vocab_lib.reserved_tokens(FLAGS.num_unused)):])
  print(f"wrote {FLAGS.vocab_file}: {len(vocab)} tokens ({num_learned} learned)")
  print(f"the input tokenized with it: {stats['words']} words -> {stats['wordpieces']} "
        f"wordpieces ({stats['wordpieces_per_word']:.3f} per word), "
        f"[UNK] {100 * stats['unk_fraction']:.3f}% of wordpieces")


if __name__ == "__main__":
  cli.run(main, define_flags, "build_vocab.py")
