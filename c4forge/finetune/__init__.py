"""Fine-tuning and evaluation on GLUE and a user's own data (finetune.md).

Modules, one job each:

* ``tasks``      the nine GLUE tasks and ``custom``: file layout, columns, labels, loaders
* ``formats``    T5 text-to-text inputs/targets and the mapping of decoded strings back to labels
* ``encoding``   token ids for the text head and the encoder heads (truncation counted)
* ``metrics``    scikit-learn / scipy metrics, task scores, the GLUE score
* ``backbone``   loading a c4forge checkpoint (or a random model of its shape) + its vocabulary
* ``t5_adapter`` fine-tuning dropout and greedy decoding over the T5 modules
* ``heads``      ``cls`` and ``hire`` classifier heads and the encoder + head model
* ``loop``       the fine-tuning run: data order, optimiser, checkpoints, exact resume
* ``evaluation`` predictions on a split and their metrics
* ``outputs``    results.json / predictions.jsonl
* ``glue``       ``c4forge glue``: every task × head × init × seed, glue.json / glue.md
* ``plots``      glue.png and the HIRE contribution-score heat map
* ``command``    ``run(request) -> result`` of finetune, evaluate and glue (``c4forge.commands``)
"""
