"""Validates pretraining TFRecords, prints their summary figures and decodes a few instances.

  python data_prep/inspect_records.py out.tfrecord [more.tfrecord ...] [--num_examples=3]

Lengths, feature names and compression come from each file's metadata (`<file>.metadata.json`)
when it exists, otherwise from the first record and the first bytes (GZIP's magic 1f 8b), unless
the flags say. Every record is checked against the schema and for internal consistency; a
corrupt or truncated record, or a file that is no TFRecord file, is reported with its file,
index and byte offset, and reading the file stops there (the records before it are counted).
Metadata that training would refuse and a directory instead of a file are errors too. Exit
status: 0 if every file and record is valid, 1 otherwise.
"""

import os
import sys

from absl import flags

if __package__ in (None, ""):
  # Run as a script from a clone without installing: make the repository root importable.
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bert_tf import cli  # pylint: disable=g-import-not-at-top,wrong-import-position
from bert_tf import io  # pylint: disable=g-import-not-at-top,wrong-import-position
from bert_tf.data import records  # pylint: disable=g-import-not-at-top,wrong-import-position

FLAGS = flags.FLAGS


def main(argv):
  paths = argv[1:]
  if not paths:
    raise cli.UsageError("give one or more TFRecord files")
  bad = 0
  for path in paths:
    if not os.path.exists(path) and io.is_local(path):
      print(f"error: {path}: no such file")
      bad += 1
      continue
    bad += records.inspect_file(
        path, vocab_file=FLAGS.vocab_file, num_examples=FLAGS.num_examples,
        max_seq_length=FLAGS.max_seq_length, max_predictions_per_seq=FLAGS.max_predictions_per_seq,
        compression=FLAGS.compression, max_errors=FLAGS.max_errors)
  return 1 if bad else 0


def define_flags(flag_values=FLAGS):
  fv = dict(flag_values=flag_values)
  flags.DEFINE_string("vocab_file", None,
                      "Vocab to decode ids with (default: the one named in the metadata).", **fv)
  flags.DEFINE_integer("num_examples", 3, "How many instances per file to decode as text.", **fv)
  flags.DEFINE_integer("max_seq_length", None,
                       "Override: sequence length (else metadata/record).", **fv)
  flags.DEFINE_integer("max_predictions_per_seq", None,
                       "Override: prediction slots (else metadata/record).", **fv)
  flags.DEFINE_enum("compression", None, ["", "GZIP"],
                    "Override: compression (else metadata, else GZIP if the file starts "
                    "with 1f 8b).", **fv)
  flags.DEFINE_integer("max_errors", 10,
                       "Stop listing invalid records of a file after this many.", **fv)


if __name__ == "__main__":
  cli.run(main, define_flags, "inspect_records.py")
