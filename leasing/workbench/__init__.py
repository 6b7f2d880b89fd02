"""Working on leased cards: environments, browser sessions (JupyterLab and its terminals)
through the portal's session proxy, SSH keys on the leased nodes, and workspaces."""
