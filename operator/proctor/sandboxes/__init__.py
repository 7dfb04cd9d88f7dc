"""Where an item's test step runs on one machine.

* `process`: a checkout and a subprocess (trusted, portable tasks; no container);
* `docker`: a fresh container of the task's image, through the Docker daemon;
* `choose`: which of the two each item gets (`--sandbox auto|process|docker`);
* `demo_images`: the demo dataset's images, built offline (`proctor images build-demo`);
* `images`: swebench-compatible images of real rows, built from source (`proctor images build`).

On Kubernetes the test step runs in the Job's pod instead (`proctor.k8s.children.manifests`).
"""
