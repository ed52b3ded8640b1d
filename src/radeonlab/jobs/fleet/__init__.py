"""The inventory's hosts: who they are, what they say, what the laptop remembers."""
