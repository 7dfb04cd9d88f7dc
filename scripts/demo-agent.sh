#!/usr/bin/env bash
# Prints the manifests of the `mixed` reference agent served in-cluster: a Deployment from the
# runner image, a Service in front of it (the operator refuses loopback endpoints, so Jobs'
# pods reach the agent through the Service) and the AgentUnderTest naming it. The one copy
# that scripts/try-operator.sh, scripts/kind-demo.sh and the real-cluster tests apply.
#
#   scripts/demo-agent.sh NAMESPACE IMAGE [PORT [PULL_POLICY [MAX_TASKS [NAME]]]]
#
# Defaults: port 9009, pull policy IfNotPresent, maxConcurrentTasks 2, AgentUnderTest
# local-agent. The pod meets Pod Security's `restricted` profile (the image runs as 10001).
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: scripts/demo-agent.sh NAMESPACE IMAGE [PORT [PULL_POLICY [MAX_TASKS [NAME]]]]" >&2; exit 2; }
ns=$1 image=$2 port=${3:-9009} pull=${4:-IfNotPresent} max_tasks=${5:-2} name=${6:-local-agent}
cat <<YAML
apiVersion: apps/v1
kind: Deployment
metadata: {name: demo-agent, namespace: $ns, labels: {app: demo-agent}}
spec:
  replicas: 1
  selector: {matchLabels: {app: demo-agent}}
  template:
    metadata: {labels: {app: demo-agent}}
    spec:
      automountServiceAccountToken: false
      securityContext: {runAsNonRoot: true, seccompProfile: {type: RuntimeDefault}}
      containers:
        - name: agent
          image: $image
          imagePullPolicy: $pull
          args: [proctor, agent, serve, --kind, mixed, --host, 0.0.0.0, --port, "$port",
                 --card-url, "http://demo-agent.$ns.svc:$port/"]
          ports: [{containerPort: $port}]
          readinessProbe: {tcpSocket: {port: $port}, periodSeconds: 1}
          resources: {requests: {cpu: 50m, memory: 128Mi}}
          securityContext:
            allowPrivilegeEscalation: false
            capabilities: {drop: [ALL]}
---
apiVersion: v1
kind: Service
metadata: {name: demo-agent, namespace: $ns}
spec:
  selector: {app: demo-agent}
  ports: [{port: $port, targetPort: $port}]
---
apiVersion: proctor.dev/v1alpha1
kind: AgentUnderTest
metadata: {name: $name, namespace: $ns}
spec:
  endpoint: http://demo-agent.$ns.svc:$port/
  # Where the Service's pods are, for the operator's NetworkPolicy (a host name is no peer of
  # a NetworkPolicy): the pod range of scripts/cluster.sh and of kind.
  endpointCidrs: [10.244.0.0/16]
  requestTimeoutSeconds: 1800
  maxConcurrentTasks: $max_tasks
YAML
