// CYAML: libyaml from libyaml-dev. Imported only by ShoalYAML.
#include <yaml.h>
