"""Sampling-and-grading shared by training, ``kitae eval``, curation and long2short.

    components.py        a run's reward: named, weighted components (each a grader), graded concurrently per group,
                         None masked; the graders' counters; steps without a finite score (the whole reward, each
                         component) and what the run says about them
    sample_and_grade.py  the one sample-and-grade loop: prompts -> engine.generate -> what graders see of each
                         completion (``sample_dict``) -> every component's grade; a prompt set in seeded batches
                         (``graded_batches``); the trainer, ``evaluate`` and curation all sample through it
    evaluate.py          pass@1 over k samples, template compliance and lengths on a prompt set

It sits below kitae.trainer, kitae.curate and kitae.long2short, which all use it, and above kitae.rollout and
kitae.graders, which it joins (docs/architecture.md).
"""
