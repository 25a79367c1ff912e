"""The GRPO trainer: ``kitae train``'s config, checks and loop (docs/architecture.md: one training step).

    config.py          the training config: one typed, validated object (each variant's settings filled in), saved
                       with the run; each section's class beside the code that reads it
    preflight.py       everything that can be wrong, checked before the model loads; the reward components
    setup.py           a run's parts built from its config: policy, reference, optimizer, engine, sampler, store
    loop.py            :class:`Trainer`: steps, evaluations, checkpoints; a step is the four stages below
    collect.py         1. sample and grade (prompt sampler, rollout engine, dynamic sampling, partial rollouts)
    async_pipeline.py  1. with ``sampling.async``: the next steps' groups sampled while this step updates
    update.py          2. the finished training batch and 3. the policy update (micro-batches, packing, ``mu`` passes)
    advantages.py      2. advantages from the step's grades
    engine_sync.py 3. the engine kept in step with the policy: weight pushes, the eval engine, its checkpoint state
    metrics.py         4. what a step logs besides the update's numbers; the groups for the run store
    run_log.py         4. where the run's record goes: the run store and the loggers
    evaluation.py      the evaluations between steps
    health.py          after each step: alarms (alarms.py: the checks, their settings, the history in memory),
                       skipped optimizer steps, steps without a reward
    stopping.py        a run asked to stop (Ctrl-C, SIGTERM, an alarm), every process at the same step
    batch.py           rollouts as training tensors; per-token log-probs of a policy on them
    step_scores.py     a step's grades as two stages read them: the reward tensor, each group's pass rate
    periodic.py        ``due``: what runs every N steps (evaluations, checkpoints, weight pushes)
    samplers.py        prompt samplers (uniform, prioritized, curriculum), registered by name, with their settings
    prompt_sets.py the ``data:`` section (prompt sets, their fields, the sampler) and the one prompt-set reader
    optim.py           the ``optim:`` section (steps, batch sizes, AdamW and its schedule)
    processes.py       what the processes of a multi-process run share and agree on
    checkpoint.py, resume.py   checkpoints, and what ``--resume`` goes on from
    loggers.py         copies of the metrics for TensorBoard, W&B and trackio (accelerate's trackers)

Nothing is imported here.
"""
