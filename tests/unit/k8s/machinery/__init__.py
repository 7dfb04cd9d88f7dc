"""proctor.k8s.machinery: the API shell's rights, names, the workqueue and the expectations."""
