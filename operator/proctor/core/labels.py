"""The keys of the labels and annotations Proctor puts on what it makes: the operator's
Jobs, pods and ConfigMaps, and the Docker sandbox's containers. One module, so that a
selector and the objects it selects cannot spell a key two ways."""

MANAGED_BY = "app.kubernetes.io/managed-by"
"""Value "proctor" on every object the operator makes (the watches select on it)."""
COMPONENT = "app.kubernetes.io/component"
"""What the object is: work-item (a Job, its pods), task, kept-patch, result (ConfigMaps),
agent (a service agent's Deployment, Service and pods)."""

LABEL_EVALUATION = "proctor.dev/evaluation"
"""The owning Evaluation's name, as a label value (the indexes key children by it)."""
LABEL_AGENT = "proctor.dev/agent"
"""The owning AgentUnderTest's name, as a label value: on a service agent's Deployment,
Service and pods (the Service selects the pods by it)."""
LABEL_ITEM = "proctor.dev/item"
"""The work item's id: on a Job and its pods, a kept patch, a result; a container's task."""
LABEL_INSTANCE = "proctor.dev/instance"
LABEL_VARIANT = "proctor.dev/variant"
LABEL_REPEAT = "proctor.dev/repeat"
LABEL_ATTEMPT = "proctor.dev/attempt"
"""Which attempt of its item a Job is: 0, then one more per retry."""
LABEL_OUTCOME = "proctor.dev/outcome"
"""A kept result's outcome (resolved, ...), for a selector by outcome."""
LABEL_UPLOAD = "proctor.dev/upload"
"""Value "failed" on a result ConfigMap kept in full because its upload to the object store
failed: the backlog the operator moves to the store once it answers (`k8s.backlog`), and
what StoreUnavailable is read back from after a restart."""
LABEL_OWNER = "proctor.dev/owner"
"""host:pid of the process that made a sandbox container (orphans are found by it)."""

ANNOTATION_ITEM = "proctor.dev/item-json"
"""The pod's work item as JSON, projected to /task/item.json by the downward API."""
ANNOTATION_ITEM_KEY = "proctor.dev/item-key"
ANNOTATION_RUNNER_VERSION = "proctor.dev/runner-version"

KUEUE_QUEUE_NAME = "kueue.x-k8s.io/queue-name"
"""Kueue's label naming the LocalQueue of a Job it manages (its QueueLabel): a Job with it
is admitted by Kueue's quota."""
KUEUE_JOB_UID = "kueue.x-k8s.io/job-uid"
"""Kueue's label on a Workload: the uid of the Job it admits."""
