"""Pretrains BERT (masked LM + next sentence) on TFRecords: python -m bert_tf.run_pretraining.

Takes the original run_pretraining.py's flags, with the same names and defaults, plus the
options of this reimplementation (strategy, optimizer, precision, accumulation, ...).
Flags -> BertConfig + PretrainingSettings -> training.run_pretraining.
"""

import sys

from absl import app
from absl import flags
from absl import logging

FLAGS = flags.FLAGS

# === The original's flags ===
flags.DEFINE_string("bert_config_file", None, "The config json file of the BERT model.")
flags.DEFINE_string("input_file", None,
                    "Input TFRecord files (comma-separated paths and globs).")
flags.DEFINE_string("output_dir", None,
                    "Where checkpoints, summaries, eval_results.txt and exports are written. A "
                    "run resumes from the latest checkpoint found here.")
flags.DEFINE_string("init_checkpoint", None,
                    "Initial weights (ours, an original TF1 checkpoint, a Model Garden "
                    "checkpoint, Hugging Face .safetensors or a .keras model). Weights only; "
                    "ignored when output_dir holds a checkpoint to resume from.")
flags.DEFINE_integer("max_seq_length", 128,
                     "Maximum sequence length; must match the data.")
flags.DEFINE_integer("max_predictions_per_seq", 20,
                     "Maximum masked LM predictions per sequence; must match the data.")
flags.DEFINE_bool("do_train", False, "Whether to train.")
flags.DEFINE_bool("do_eval", False, "Whether to evaluate (after training, if training).")
flags.DEFINE_integer("train_batch_size", 32,
                     "Global batch size per optimizer update (split over replicas and "
                     "accumulation micro-batches).")
flags.DEFINE_integer("eval_batch_size", 8, "Global batch size for eval.")
flags.DEFINE_float("learning_rate", 5e-5, "The peak learning rate.")
flags.DEFINE_integer("num_train_steps", 100000, "Number of training steps (updates).")
flags.DEFINE_integer("num_warmup_steps", 10000, "Number of warmup steps.")
flags.DEFINE_integer("save_checkpoints_steps", 1000, "How often to save a checkpoint.")
flags.DEFINE_integer("iterations_per_loop", 1000,
                     "Steps per tf.function call (and between log lines).")
flags.DEFINE_integer("max_eval_steps", 100, "Number of eval batches.")
flags.DEFINE_bool("use_tpu", False, "Whether to use a TPU (same as --strategy=tpu).")
flags.DEFINE_string("tpu_name", None, "The Cloud TPU to use (name or grpc:// address).")
flags.DEFINE_string("tpu_zone", None, "GCE zone of the Cloud TPU.")
flags.DEFINE_string("gcp_project", None, "Project of the Cloud TPU.")
flags.DEFINE_string("master", None, "TPU address, used when --tpu_name is not given.")
flags.DEFINE_integer("num_tpu_cores", 8, "TPU cores (informational: all cores are used).")

# === Additions ===
flags.DEFINE_enum("strategy", None, ["tpu", "mirrored", "multi_worker_mirrored", "one_device"],
                  "tf.distribute strategy. Default: tpu with --use_tpu, "
                  "multi_worker_mirrored when TF_CONFIG names several workers, mirrored with "
                  "several GPUs, else one_device.")
flags.DEFINE_enum("optimizer", "adamw", ["adamw", "lamb"],
                  "adamw: the original AdamWeightDecay; lamb: LAMB for large batches.")
flags.DEFINE_enum("mixed_precision", "none", ["none", "bfloat16", "float16"],
                  "Compute dtype; float16 uses dynamic loss scaling.")
flags.DEFINE_bool("jit_compile", False, "Compile the training step with XLA.")
flags.DEFINE_integer("gradient_accumulation_steps", 1,
                     "Micro-batches per update: train_batch_size is split into this many, "
                     "their gradients summed in-graph and clipped once.")
flags.DEFINE_string("eval_input_file", None,
                    "Eval TFRecords. Default: --input_file (the original evaluated on its "
                    "training data).")
flags.DEFINE_integer("keep_checkpoint_max", 5, "Checkpoints kept in output_dir.")
flags.DEFINE_bool("dynamic_masking", False,
                  "Re-mask every batch on the fly (RoBERTa-style) from the same records; "
                  "needs --vocab_file.")
flags.DEFINE_bool("export_at_end", True,
                  "Export the encoder and pretraining SavedModels to output_dir/export/<step> "
                  "at the end of training.")
flags.DEFINE_bool("export_every_checkpoint", False, "Also export at every checkpoint.")
flags.DEFINE_bool("export_serving", True,
                  "With --vocab_file, exports also include the TF Serving models (raw text "
                  "in) under export/<step>/serving/; see python -m bert_tf.export.")
flags.DEFINE_string("vocab_file", None,
                    "The vocab (optional): copied beside exports, needed by --dynamic_masking.")
flags.DEFINE_bool("do_lower_case", None,
                  "If given, checked against the casing the data was made with.")
flags.DEFINE_integer("seed", None,
                     "Seeds weight init and the data order (a resumed run then sees exactly "
                     "the batches of an uninterrupted one).")
flags.DEFINE_bool("deterministic_ops", False,
                  "tf.config.experimental.enable_op_determinism (bitwise repeatable runs, "
                  "slower).")


def main(argv):
  del argv
  # Imported here so that --help does not pay for TensorFlow.
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from bert_tf import training  # pylint: disable=g-import-not-at-top
  from bert_tf.config import BertConfig, ConfigError  # pylint: disable=g-import-not-at-top

  logging.set_verbosity(logging.INFO)
  if FLAGS.deterministic_ops:
    tf.config.experimental.enable_op_determinism()
  try:
    config = BertConfig.from_json_file(FLAGS.bert_config_file)
    settings = training.PretrainingSettings(
        input_file=FLAGS.input_file, output_dir=FLAGS.output_dir,
        eval_input_file=FLAGS.eval_input_file, init_checkpoint=FLAGS.init_checkpoint,
        max_seq_length=FLAGS.max_seq_length,
        max_predictions_per_seq=FLAGS.max_predictions_per_seq, do_train=FLAGS.do_train,
        do_eval=FLAGS.do_eval, train_batch_size=FLAGS.train_batch_size,
        eval_batch_size=FLAGS.eval_batch_size, learning_rate=FLAGS.learning_rate,
        num_train_steps=FLAGS.num_train_steps, num_warmup_steps=FLAGS.num_warmup_steps,
        save_checkpoints_steps=FLAGS.save_checkpoints_steps,
        iterations_per_loop=FLAGS.iterations_per_loop, max_eval_steps=FLAGS.max_eval_steps,
        optimizer=FLAGS.optimizer, mixed_precision=FLAGS.mixed_precision,
        jit_compile=FLAGS.jit_compile,
        gradient_accumulation_steps=FLAGS.gradient_accumulation_steps,
        keep_checkpoint_max=FLAGS.keep_checkpoint_max, dynamic_masking=FLAGS.dynamic_masking,
        vocab_file=FLAGS.vocab_file, do_lower_case=FLAGS.do_lower_case,
        export_at_end=FLAGS.export_at_end,
        export_every_checkpoint=FLAGS.export_every_checkpoint,
        export_serving=FLAGS.export_serving, seed=FLAGS.seed)
    strategy = training.select_strategy(FLAGS.strategy, FLAGS.use_tpu, FLAGS.tpu_name,
                                        FLAGS.tpu_zone, FLAGS.gcp_project, FLAGS.master,
                                        FLAGS.num_tpu_cores)
    result = training.run_pretraining(config, settings, strategy)
  except (training.TrainingError, ConfigError) as e:
    # Bad flags, data or checkpoints: a message, not a traceback.
    print(f"run_pretraining: error: {e}", file=sys.stderr)
    sys.exit(1)
  logging.info("Finished at step %d", result["global_step"])
  if "export_dir" in result:
    logging.info("Exported models: %s", result["export_dir"])


if __name__ == "__main__":
  flags.mark_flags_as_required(["bert_config_file", "input_file", "output_dir"])
  app.run(main)
