"""Files shipped with the package: the embedded demo config."""
