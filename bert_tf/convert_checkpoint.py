"""Converts BERT weights between formats: python -m bert_tf.convert_checkpoint --from=A --to=B.

Formats: tf1 (the original release's checkpoints, e.g. bert_model.ckpt), model_garden (TF Model
Garden BertEncoder / BertEncoderV2 checkpoints; read only), hf (Hugging Face model folders:
model.safetensors with config.json and the tokenizer files), keras (our .keras models) and bert_tf
(checkpoints written by our run_pretraining and fine-tuning runs, or their --output_dir for the
latest one; read only). They are detected from the paths unless named with --from_format /
--to_format. The config comes from --bert_config_file, or from bert_config.json (tf1, Model
Garden) or config.json (hf) beside the input.

The head is kept: a fine-tuned classifier, SQuAD or tagger head goes to every output format (the
original's output_weights / cls/squad names in tf1, Hugging Face's classifier.* / qa_outputs.*
with the class in config.json's architectures, the task model in keras), its labels and kind to
task_info.json beside the output (and config.json's id2label). A head that cannot be kept is
refused; --drop_head converts the encoder alone. What the model has is written: a part that the
output's layout expects but the model never had (a tagger's or span model's pooler in tf1) is
named in one warning line and does not stop the conversion.

Beside the output: the config (bert_config.json for tf1, config.json for hf) and the tokenizer,
from --vocab_file / --do_lower_case or what the input's folder records: for hf vocab.txt,
tokenizer_config.json with the casing and special_tokens_map.json (required); for tf1 and keras
vocab.txt, as in the original's release folders, and tokenizer_config.json with the casing, when
they are known. So a folder converts onwards (hf -> tf1 -> hf) without --vocab_file. Existing
outputs are refused unless --overwrite is given; everything is written under a temporary name and
renamed when complete, the weights last.

The command is thin: its flags become a model.conversion_inputs.Request, and
conversion_inputs.convert resolves and converts it (every failure one line naming its flag).

Examples:
  python -m bert_tf.convert_checkpoint --from=uncased_L-12_H-768_A-12/bert_model.ckpt \\
      --to=out/model.safetensors
  python -m bert_tf.convert_checkpoint --from=hf_model_folder --to=out/bert_model.ckpt
  python -m bert_tf.convert_checkpoint --from=classifier_run \\
      --to=hf_classifier/model.safetensors
"""

from absl import flags

from bert_tf import cli

FLAGS = flags.FLAGS
FORMATS = ("tf1", "model_garden", "hf", "keras", "bert_tf")  # checkpoints.FORMATS


def define_flags(flag_values=FLAGS) -> None:
  fv = dict(flag_values=flag_values)
  flags.DEFINE_string("from", None, "Input: checkpoint prefix, .safetensors or .keras file, a "
                      "Hugging Face model folder, or a run's --output_dir (its latest "
                      "checkpoint).", **fv)
  flags.DEFINE_string("to", None, "Output: checkpoint prefix, .safetensors (a Hugging Face "
                      "folder: name it <folder>/model.safetensors) or .keras file.", **fv)
  flags.DEFINE_enum("from_format", None, list(FORMATS), "Input format (default: detected).",
                    **fv)
  flags.DEFINE_enum("to_format", None, ["tf1", "hf", "keras"], "Output format (default: from "
                    "the --to name: .safetensors -> hf, .keras -> keras, else tf1).", **fv)
  flags.DEFINE_string("bert_config_file", None, "bert_config.json of the model (default: the "
                      "one beside the input).", **fv)
  flags.DEFINE_string("vocab_file", None, "The vocab written beside the output as vocab.txt, a "
                      "file or a folder holding vocab.txt (default: the vocab.txt beside the "
                      "input; an hf output needs one).", **fv)
  flags.DEFINE_bool("do_lower_case", None, "The casing written beside the output to "
                    "tokenizer_config.json (default: what the input's folder records in "
                    "task_info.json, data_metadata.json or tokenizer_config.json, or its "
                    "original release name; an hf output needs it).", **fv)
  flags.DEFINE_bool("drop_head", False, "Convert the encoder alone, without the input's head "
                    "(pretraining or fine-tuned). Without it, a head the output cannot hold "
                    "is refused.", **fv)
  flags.DEFINE_bool("overwrite", False, "Replace existing outputs: the --to file(s) and the "
                    "files written beside them (config, task_info.json, tokenizer files).", **fv)
  flags.mark_flags_as_required(["from", "to"], **fv)


def main(argv):
  del argv
  from bert_tf.model import conversion_inputs  # pylint: disable=g-import-not-at-top
  request = conversion_inputs.Request(
      source=FLAGS["from"].value, target=FLAGS.to, source_format=FLAGS.from_format,
      target_format=FLAGS.to_format, bert_config_file=FLAGS.bert_config_file,
      vocab_file=FLAGS.vocab_file, do_lower_case=FLAGS.do_lower_case,
      drop_head=FLAGS.drop_head, overwrite=FLAGS.overwrite)
  try:
    converted = conversion_inputs.convert(request)
  except conversion_inputs.ArgumentError as e:
    raise cli.UsageError(str(e)) from None
  print(converted.summary())


if __name__ == "__main__":
  cli.run(main, define_flags, "convert_checkpoint")
