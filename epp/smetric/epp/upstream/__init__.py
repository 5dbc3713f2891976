"""What the picker reads of the upstream picker's world: its config format, its plugin types."""
