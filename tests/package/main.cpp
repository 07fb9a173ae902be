// Consumer of an installed xshard: built against find_package(xshard CONFIG REQUIRED).
#include <xshard/xshard.hpp>

static_assert(xshard::hlo_sharding<xshard::mesh<"data=4, model=2">, xshard::spec<"data, model">>() ==
              "{devices=[4,2]0,1,2,3,4,5,6,7}");

int main() { return 0; }
