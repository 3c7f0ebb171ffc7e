"""Runs the pipeline on the bundled sample corpus, step by step, with the real command lines.

  python data_prep/run_sample.py [--output_dir=sample_output]

Each step is the documented CLI run as a subprocess, printed before it runs, so what this does is
exactly what a user would type. Outputs go to --output_dir (default: sample_output/ in the
current directory), replaced on each run.
"""

import argparse
import os
import shlex
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SAMPLE = os.path.join(HERE, "sample", "sample_text.txt")


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
  run_step("make masked-LM / next-sentence pretraining records", [
      python, os.path.join(HERE, "create_pretraining_data.py"), f"--input_file={SAMPLE}",
      f"--output_file={os.path.join(args.output_dir, 'pretraining_data.tfrecord')}",
      f"--vocab_file={vocab}", "--do_lower_case=True", "--max_seq_length=128",
      "--max_predictions_per_seq=20", "--dupe_factor=2", "--overwrite"])
  print(f"\nSample pipeline done; outputs are in {args.output_dir}/")


if __name__ == "__main__":
  main()
