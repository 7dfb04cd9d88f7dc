// Command cri-sweep stops and removes every pod sandbox a CRI runtime holds.
//
// cluster.sh down runs it after the kubelet has stopped: stopping a sandbox through
// the CRI (rather than killing its processes) lets the runtime tear down the pod's CNI
// network, so no veth, IP reservation or network namespace outlives the cluster. `up`
// runs it too, for the pods of a cluster that ended without `down`.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: cri-sweep unix:///path/to/runtime.sock")
		os.Exit(2)
	}
	conn, err := grpc.NewClient(os.Args[1], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintln(os.Stderr, "cri-sweep:", err)
		os.Exit(1)
	}
	defer conn.Close()
	client := runtimeapi.NewRuntimeServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The cluster is going away: kill containers outright rather than wait out their
	// grace periods (CoreDNS alone would take its 5 s lame duck).
	containers, err := client.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "cri-sweep: listing containers:", err)
		os.Exit(1)
	}
	for _, c := range containers.Containers {
		if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
			// Failures show again, and count, when the sandbox is stopped below.
			_, _ = client.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: c.Id, Timeout: 0})
		}
	}
	pods, err := client.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "cri-sweep: listing pod sandboxes:", err)
		os.Exit(1)
	}
	failed := false
	for _, pod := range pods.Items {
		// Stopping kills the pod's containers and releases its network; removing
		// deletes the containers and the sandbox itself.
		if _, err := client.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod.Id}); err != nil {
			fmt.Fprintf(os.Stderr, "cri-sweep: stopping %s/%s: %v\n", pod.Metadata.Namespace, pod.Metadata.Name, err)
			failed = true
			continue
		}
		if _, err := client.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod.Id}); err != nil {
			fmt.Fprintf(os.Stderr, "cri-sweep: removing %s/%s: %v\n", pod.Metadata.Namespace, pod.Metadata.Name, err)
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}
