r"""Creates masked-LM / next-sentence pretraining TFRecords from one-sentence-per-line text.

  python data_prep/create_pretraining_data.py \
    --input_file=corpus.txt --output_file=out.tfrecord --vocab_file=vocab.txt \
    --reproduce_original

Every flag of the original script keeps its name and default. With --reproduce_original the
records equal the original's for the same input, vocab, flags and seed (same examples, same
order); our bytes are also stable from run to run. By default the corpus is streamed in blocks
of documents made into instances by all cores (same algorithm within each block, masked
positions drawn lazily; the output depends on the seed and --block_size_mb, not on
--num_workers). Outputs are the --output_file list, or --num_output_shards files
`pretraining-00000-of-0000N.tfrecord[.gz]` in --output_dir; a metadata file
`<output>.metadata.json` is written beside each. --segmented_input makes whole-word masking
group the tokens of space-separated words (e.g. segmented Chinese).

Only outputs that receive records are written (with fewer instances than outputs, a warning
names the others; --output_dir shards are then numbered -of-<written>). The final renames are
journaled: a run killed while committing is rolled back by the next run on the same outputs, so
the same command works again. One file named twice, or an output named like another's
.metadata.json, is refused up front; lines over 400 x --max_seq_length bytes are warned about
(file:line). Each output folder is locked for the whole run (.bert_tf.lock): a second run on
the same folder fails at once. See bert_tf/data/pretraining_data.py for the details.

Apache Beam (pip install -e '.[beam]'): with --runner=NAME the default mode runs as a Beam
pipeline (bert_tf/data/beam_pipeline.py) on that runner, and every flag this tool does not
define is passed to Beam's PipelineOptions (--runner, --direct_num_workers,
--direct_running_mode, --project, --region, --temp_location, --setup_file, ...; with --runner,
--num_workers is Beam's too: the runner's number of workers). Same records as the local mode
for the same input, flags and seed (the same multiset; Beam's sink picks each record's shard
and order). Without --runner, Beam is not imported.
"""

import os
import sys

from absl import flags

if __package__ in (None, ""):
  # Run as a script from a clone without installing: make the repository root importable.
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bert_tf import cli  # pylint: disable=g-import-not-at-top,wrong-import-position
from bert_tf.data import pretraining_data  # pylint: disable=g-import-not-at-top,wrong-import-position

FLAGS = flags.FLAGS


def define_flags(flag_values=FLAGS):
  fv = dict(flag_values=flag_values)
  cli.define_text_input_flags(
      flag_values, overwrite_help="Replace existing non-empty outputs (with --output_dir, also "
      "remove shards of another --num_output_shards or compression).")
  flags.DEFINE_string("output_file", None,
                      "Output TFRecord file(s), comma-separated; instances go round-robin. "
                      "Or use --output_dir.", **fv)
  flags.DEFINE_string("output_dir", None,
                      "Instead of --output_file: a folder that receives --num_output_shards files "
                      "pretraining-00000-of-NNNNN.tfrecord[.gz] (instances round-robin), each with "
                      "its .metadata.json.", **fv)
  flags.DEFINE_integer("num_output_shards", 1, "With --output_dir: how many record files.", **fv)
  flags.DEFINE_string("vocab_file", None, "The WordPiece vocabulary the model is trained with.",
                      **fv)
  flags.DEFINE_bool("do_lower_case", True,
                    "Lower-case the input (and strip accents); True for uncased models.", **fv)
  flags.DEFINE_bool("do_whole_word_mask", False,
                    "Mask whole words (a token and its ## continuations) together.", **fv)
  flags.DEFINE_integer("max_seq_length", 128, "Maximum sequence length (5 to 512).", **fv)
  flags.DEFINE_integer("max_predictions_per_seq", 20,
                       "Maximum number of masked-LM predictions per sequence.", **fv)
  flags.DEFINE_integer("random_seed", 12345, "Random seed for data generation.", **fv)
  flags.DEFINE_integer("dupe_factor", 10,
                       "Number of times to duplicate the input data (with different masks).", **fv)
  flags.DEFINE_float("masked_lm_prob", 0.15, "Masked LM probability, in (0, 1].", **fv)
  flags.DEFINE_float("short_seq_prob", 0.1,
                     "Probability of creating sequences shorter than the maximum length.", **fv)
  flags.DEFINE_bool("reproduce_original", False,
                    "Follow the original algorithm and order of random draws exactly: the records "
                    "equal the original script's for the same input, vocab, flags and seed.", **fv)
  flags.DEFINE_enum("compression", "", ["", "GZIP"], "Compression of the output TFRecords.", **fv)
  flags.DEFINE_bool("gzip", False, "Shorthand for --compression=GZIP.", **fv)
  flags.DEFINE_bool("use_v2_feature_names", False,
                    "Store input_word_ids / input_type_ids (Model Garden's names) instead of "
                    "input_ids / segment_ids.", **fv)
  flags.DEFINE_integer("num_workers", 0,
                       "Default mode: worker processes (0 = all cores). The output does not "
                       "depend on it. With --runner it is Beam's --num_workers.", **fv)
  flags.DEFINE_float("block_size_mb", 1.0,
                     "Default mode: documents are processed in blocks of about this much text; "
                     "random-next segments come from the same block (at most 1024). Changes "
                     "the output.", **fv)
  flags.DEFINE_bool("segmented_input", False,
                    "With --do_whole_word_mask: the input is already segmented into words "
                    "separated by spaces (e.g. the output of a Chinese word segmenter), and all "
                    "tokens of one word are masked together. The spaces do not change the tokens. "
                    "Without it, Chinese whole-word masking masks single characters, as in the "
                    "original.", **fv)


def config_from_flags() -> pretraining_data.DataConfig:
  if FLAGS.gzip and FLAGS.compression not in ("", "GZIP"):
    raise cli.UsageError("--gzip contradicts --compression")
  for name in ("input_file", "vocab_file"):
    if not FLAGS[name].value:
      raise cli.UsageError(f"--{name} is required")
  if FLAGS.output_file and FLAGS.output_dir:
    raise cli.UsageError("--output_file and --output_dir are mutually exclusive: give a list "
                         "of files, or a folder and --num_output_shards")
  if not FLAGS.output_file and not FLAGS.output_dir:
    raise cli.UsageError("one of --output_file or --output_dir is required")
  ignored = [f"--{n}" for n in ("num_workers", "block_size_mb") if FLAGS[n].present]
  if FLAGS.reproduce_original and ignored:
    raise cli.UsageError(f"--reproduce_original runs the original's single pass, which has no "
                         f"{' or '.join(ignored)}: drop {'them' if len(ignored) > 1 else 'it'}")
  if FLAGS.output_file and FLAGS["num_output_shards"].present:
    raise cli.UsageError("--num_output_shards needs --output_dir (with --output_file the number "
                         "of outputs is the length of its list)")
  # DataConfig's fields are named like the flags, but for the two split lists.
  return cli.settings_from_flags(
      pretraining_data.DataConfig, FLAGS,
      input_patterns=cli.split_list(FLAGS.input_file),
      output_files=cli.split_list(FLAGS.output_file or ""),
      output_dir=FLAGS.output_dir or "",
      compression="GZIP" if FLAGS.gzip else FLAGS.compression)


# The Beam pipeline flags of this run (split_beam_args), empty for the local mode.
BEAM_ARGS = []


def split_beam_args(argv, flag_values=FLAGS):
  """(argv for absl, Beam's flags): with --runner, every flag this tool does not define.

  Without --runner the argv is returned whole (an unknown flag stays a usage error). With it,
  --num_workers is Beam's (the runner's workers) rather than the local mode's processes.
  Values may be given as --name=value or --name value.
  """
  scratch = flags.FlagValues()
  define_flags(scratch)
  ours = (set(scratch) | set(flag_values)) - {"num_workers"}
  booleans = {name for name in ours if isinstance(
      (scratch[name] if name in scratch else flag_values[name]), flags.BooleanFlag)}

  def is_ours(arg):
    name = arg[2:].split("=", 1)[0]
    return name in ours or (name.startswith("no") and name[2:] in booleans)

  args = list(argv[1:])
  if not any(a == "--runner" or a.startswith("--runner=") for a in args):
    return list(argv), []
  absl_args, beam_args = [], []
  i = 0
  while i < len(args):
    arg = args[i]
    if arg.startswith("--") and not is_ours(arg):
      beam_args.append(arg)
      # `--name value`: the value follows as its own argument.
      if "=" not in arg and i + 1 < len(args) and not args[i + 1].startswith("-"):
        beam_args.append(args[i + 1])
        i += 1
    else:
      absl_args.append(arg)
    i += 1
  return [argv[0]] + absl_args, beam_args


def main(argv):
  if len(argv) > 1:
    raise cli.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
  config = config_from_flags()
  try:
    if BEAM_ARGS:
      try:
        from bert_tf.data import beam_pipeline  # pylint: disable=g-import-not-at-top
      except ImportError as e:
        raise cli.UsageError(f"--runner needs Apache Beam ({e}): pip install -e '.[beam]'") \
            from None
      summary = beam_pipeline.run(config, BEAM_ARGS)
    else:
      summary = pretraining_data.run(config)
  except pretraining_data.UsageError as e:  # a flag value the library refused
    raise cli.UsageError(str(e)) from None
  files = summary["output_files"]
  print(f"Wrote {files[0]}" + (f" and {len(files) - 1} more" if len(files) > 1 else ""))
  print(pretraining_data.format_summary(summary))


def run_command(argv, flag_values=FLAGS):
  """Splits off Beam's flags, then runs the tool (cli.run: never returns)."""
  argv, BEAM_ARGS[:] = split_beam_args(argv, flag_values)
  cli.run(main, define_flags, "create_pretraining_data.py", argv=argv, flag_values=flag_values)


if __name__ == "__main__":
  run_command(sys.argv)
