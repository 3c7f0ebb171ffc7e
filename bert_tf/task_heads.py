"""The one registration of a task's head: the modules that define a head the model tier does not
build itself.

Each module named here defines HEAD_SPEC, a bert_tf.model.head_specs.HeadSpec: its head kind's
facts (Hugging Face class, task_names, whether its weights are the root-scope output_weights /
output_bias), how its Keras model is built from a config, how a built model of it is recognised,
its weights' check at conversion and how the inference graph serves it. The model tier reads
this list, by name, the first time it is asked about head kinds (provenance.registered_heads),
and imports the modules then; a task package may import the model tier, never the reverse, and
a name read at run time is no import arrow (tests/test_imports.py reads import statements).

Why a list of names read lazily rather than tasks registering themselves when imported: every
reader (a conversion, load_weights, a training run's resume check, an export) then knows every
head whatever it imported first, and the list is one place a new task edits (CONTRIBUTING.md,
"Adding a task"). Only the encoder's own pretraining head is built in (model/heads.py,
provenance.BUILT_IN_HEAD_KINDS). The order is the registry's (error messages list heads in it);
no reader depends on it.

Foundation: imports nothing, so the model tier's narrowest module (provenance) may read it.
"""

HEAD_MODULES = (
    "bert_tf.tasks.classifier.head",
    "bert_tf.tasks.squad.head",
    "bert_tf.tasks.tagging.head",
    "bert_tf.tasks.multiple_choice.head",
)
