"""The small core shared by the library and the admission controller.

Pure and dependent on nothing else of ours: the names Kubernetes sees (:mod:`.names`), the
execution identity (:mod:`.identity`), the admission-count rules of both modes
(:mod:`.admission_count`), the error tree (:mod:`.errors`), readers of objects
(:mod:`.objects`) and Kubernetes' times (:mod:`.times`). The controller imports nothing of
the library but this package and :mod:`dispatch_kubeflow.kube` (the import-linter contracts
in pyproject.toml hold it to that).
"""
