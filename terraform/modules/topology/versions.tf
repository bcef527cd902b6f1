terraform {
  # Pure Terraform: no provider, so `init` works offline and the module can be applied
  # anywhere (CI applies it with the three-region example's inputs).
  required_version = ">= 1.0.0"
}
