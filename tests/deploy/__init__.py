"""What is deployed: the Helm chart, the runner image, and a policy scanner on the manifests."""
