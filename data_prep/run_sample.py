"""Runs the whole pipeline on the bundled sample corpus, step by step, with the real commands.

Learns a vocab, tokenizes the sample, makes pretraining records, pretrains a tiny BERT for a few
steps with evaluation and export, then queries the exported TF Serving text model.

  python data_prep/run_sample.py [--output_dir=sample_output]

Each step is the documented CLI run as a subprocess, printed before it runs, so what this does is
exactly what a user would type. Outputs go to --output_dir (default: sample_output/ in the
current directory), replaced on each run.
"""

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(HERE)
SAMPLE = os.path.join(HERE, "sample", "sample_text.txt")
TRAIN_STEPS = 150  # a couple of minutes on a laptop CPU; enough to see the loss fall

# Loads an exported text model the way a server does (no bert_tf import) and fills a mask.
QUERY_EXPORT = """
import sys
import tensorflow as tf
import tensorflow_text  # registers the tokenizer ops
model = tf.saved_model.load(sys.argv[1])
text = "she was the youngest of the two [MASK] of a most affectionate father."
out = model.signatures["fill_mask"](text=tf.constant([text]))
tokens = [t.decode() for t in out["top_tokens"].numpy()[0, 0]]
probs = out["top_probabilities"].numpy()[0, 0]
print(text)
print("  [MASK] ->", ", ".join(f"{t} ({p:.3f})" for t, p in zip(tokens, probs)))
"""


def run_step(title, args):
  print(f"\n=== {title}\n$ {' '.join(shlex.quote(a) for a in args)}", flush=True)
  started = time.time()
  result = subprocess.run(args)
  if result.returncode != 0:
    sys.exit(f"run_sample: step '{title}' failed with exit code {result.returncode}")
  print(f"({title}: {time.time() - started:.1f} s)", flush=True)


def main():
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--output_dir", default="sample_output")
  args = parser.parse_args()
  os.makedirs(args.output_dir, exist_ok=True)
  vocab = os.path.join(args.output_dir, "vocab.txt")
  python = sys.executable

  run_step("learn a WordPiece vocab from the sample", [
      python, os.path.join(HERE, "build_vocab.py"), f"--input_file={SAMPLE}",
      f"--vocab_file={vocab}", "--vocab_size=8000", "--do_lower_case=True", "--overwrite"])
  run_step("tokenize the sample with it", [
      python, os.path.join(HERE, "tokenize_text.py"), f"--input_file={SAMPLE}",
      f"--vocab_file={vocab}", "--do_lower_case=True",
      f"--output_file={os.path.join(args.output_dir, 'sample_tokens.txt')}", "--overwrite"])
  records = os.path.join(args.output_dir, "pretraining_data.tfrecord")
  run_step("make masked-LM / next-sentence pretraining records", [
      python, os.path.join(HERE, "create_pretraining_data.py"), f"--input_file={SAMPLE}",
      f"--output_file={records}",
      f"--vocab_file={vocab}", "--do_lower_case=True", "--max_seq_length=128",
      "--max_predictions_per_seq=20", "--dupe_factor=2", "--overwrite"])

  # A tiny BERT whose vocab_size is the learned vocab's.
  with open(os.path.join(REPO_ROOT, "configs", "bert_config_tiny.json")) as f:
    config = json.load(f)
  with open(vocab, encoding="utf-8") as f:
    config["vocab_size"] = sum(1 for _ in f)
  config_file = os.path.join(args.output_dir, "bert_config.json")
  with open(config_file, "w") as f:
    json.dump(config, f, indent=2, sort_keys=True)
  train_dir = os.path.join(args.output_dir, "pretraining")
  shutil.rmtree(train_dir, ignore_errors=True)  # otherwise the run would resume the last one
  run_step("pretrain a tiny BERT for a few steps, evaluate and export it", [
      python, "-m", "bert_tf.run_pretraining", f"--bert_config_file={config_file}",
      f"--input_file={records}", f"--output_dir={train_dir}", f"--vocab_file={vocab}",
      "--do_lower_case=True", "--do_train", "--do_eval", "--train_batch_size=32",
      f"--num_train_steps={TRAIN_STEPS}", "--num_warmup_steps=15", "--learning_rate=1e-3",
      "--save_checkpoints_steps=50", "--iterations_per_loop=25", "--max_eval_steps=10"])
  with open(os.path.join(train_dir, "eval_results.txt")) as f:
    print("eval_results.txt:\n" + f.read())
  text_model = os.path.join(train_dir, "export", str(TRAIN_STEPS), "serving", "bert", "1")
  run_step("ask the exported text model (TensorFlow + tensorflow-text only) to fill a mask", [
      python, "-c", QUERY_EXPORT, text_model])
  print(f"\nSample pipeline done; outputs are in {args.output_dir}/")


if __name__ == "__main__":
  main()
