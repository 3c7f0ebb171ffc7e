"""The one export convention of the training commands: what a command hands its run, and where
the run's exports go.

run_pretraining and every fine-tuning command export the same way: the command hands its run an
`Exporter` (the run never imports serving code: training stays below it, and a task's export
module is its own), and after training the run's chief calls

    exporter.export(model, config, settings, info, version=step) -> the directory written

with the trained model (any dtype policy, possibly under a strategy: the export builds its own
float32 copy, once), the run's config and settings, what the run records (`info`: the
task_info.json of a fine-tuning run, the data's metadata of a pretraining run) and the global
step as the version. Every export of every command has one layout, TF Serving's: a model base
directory per model under <output_dir>/EXPORT_DIR/, a version directory per step,

    <output_dir>/export/<model_name>/<step>/

so `tensorflow_model_server --model_base_path=<output_dir>/export/<model_name>` serves the
newest step of any of them. A fine-tuning command writes one model (named by its task's export
module); run_pretraining writes the plain SavedModels "encoder" (its Exporter's model_name,
always written) and "pretraining", and with a vocab the raw-text TF Serving models "bert",
"bert_encoder" and "bert_preprocessor", all at the same step. Each version directory holds
its bert_config.json (and vocab.txt, data_metadata.json or task_info.json) in assets/.

docs/export.md describes what each holds.

Model tier (the foundation's io only), so serving, training and tasks all read it.
"""

from typing import Any, Callable, NamedTuple

from bert_tf import io

EXPORT_DIR = "export"


class Exporter(NamedTuple):
  """The export a command hands to its run.

  Attributes:
    model_name: the folder under <output_dir>/export/ that the versions go to (a fine-tuning
      task's name for its model; "encoder" for run_pretraining, whose other models are written
      beside it at the same version).
    export: (model, config, settings, info, version) -> the directory written, which is
      export_path(settings.output_dir, model_name, version).
  """
  model_name: str
  export: Callable[..., str]


def export_path(output_dir: str, model_name: str, version: Any) -> str:
  """<output_dir>/export/<model_name>/<version>: where an Exporter writes the export of a run's
  step `version`."""
  if not model_name:
    raise ValueError("every export has a model name (the folder under export/)")
  return io.join(output_dir, EXPORT_DIR, model_name, str(version))
