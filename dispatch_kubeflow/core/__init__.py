"""The small core shared by the library and the admission controller.

Only names Kubernetes sees and the execution-identity arithmetic live here; the
controller imports nothing else of the library but :mod:`dispatch_kubeflow.kube`.
"""
