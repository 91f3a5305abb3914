"""PHP-frame tests: the distribution's php-cli (.ci/install.d/interpreters.sh installs it)."""
