"""Converts BERT weights between formats: python -m bert_tf.convert_checkpoint --from=A --to=B.

Formats: tf1 (the original release's checkpoints, e.g. bert_model.ckpt), model_garden (TF Model
Garden BertEncoder / BertEncoderV2 checkpoints; read only), hf (Hugging Face safetensors),
keras (our .keras models) and bert_tf (checkpoints written by our run_pretraining, or its
--output_dir for the latest one; read only). They are detected from the paths unless named with
--from_format / --to_format. The config comes from --bert_config_file, or from bert_config.json (tf1, Model
Garden) or config.json (hf) beside the input.

Examples:
  python -m bert_tf.convert_checkpoint --from=uncased_L-12_H-768_A-12/bert_model.ckpt \\
      --to=out/model.safetensors
  python -m bert_tf.convert_checkpoint --from=hf_model/model.safetensors --to=out/bert_model.ckpt
"""

from absl import flags

from bert_tf import cli

FLAGS = flags.FLAGS
FORMATS = ("tf1", "model_garden", "hf", "keras", "bert_tf")  # checkpoints.FORMATS


def define_flags(flag_values=FLAGS) -> None:
  fv = dict(flag_values=flag_values)
  flags.DEFINE_string("from", None, "Input: checkpoint prefix, .safetensors or .keras file, or "
                      "a run_pretraining --output_dir.", **fv)
  flags.DEFINE_string("to", None, "Output: checkpoint prefix, .safetensors or .keras file.",
                      **fv)
  flags.DEFINE_enum("from_format", None, list(FORMATS), "Input format (default: detected).",
                    **fv)
  flags.DEFINE_enum("to_format", None, ["tf1", "hf", "keras"], "Output format (default: from "
                    "the --to name: .safetensors -> hf, .keras -> keras, else tf1).", **fv)
  flags.DEFINE_string("bert_config_file", None, "bert_config.json of the model (default: the "
                      "one beside the input).", **fv)
  flags.mark_flags_as_required(["from", "to"], **fv)


def main(argv):
  del argv
  from bert_tf.config import BertConfig  # pylint: disable=g-import-not-at-top
  from bert_tf.model import checkpoints  # pylint: disable=g-import-not-at-top
  config = BertConfig.from_json_file(FLAGS.bert_config_file) if FLAGS.bert_config_file else None
  config = checkpoints.convert_checkpoint(FLAGS["from"].value, FLAGS.to, FLAGS.from_format,
                                          FLAGS.to_format, config)
  print(f"Wrote {FLAGS.to} ({config.num_hidden_layers} layers, hidden {config.hidden_size})")


if __name__ == "__main__":
  cli.run(main, define_flags, "convert_checkpoint")
